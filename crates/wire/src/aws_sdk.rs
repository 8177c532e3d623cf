//! MSK IAM credentials from the AWS SDK's default credential chain (`aws-config`), the cargo
//! feature `aws-sdk`: environment, shared files (including `role_arn` profiles = STS AssumeRole,
//! `sso_session` = IAM Identity Center, `credential_process`), web identity (EKS IRSA), ECS and
//! EKS Pod Identity container credentials (`AWS_CONTAINER_CREDENTIALS_FULL_URI` /
//! `_RELATIVE_URI`, `AWS_CONTAINER_AUTHORIZATION_TOKEN[_FILE]`) and the EC2 instance role
//! (IMDSv2), in the SDK's order and with its own caching and refresh. The signing stays
//! `aws.rs`'s; only where the keys come from changes.
//!
//! The SDK's HTTPS client uses rustls with ring (the provider the rest of strait-wire uses) and
//! `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY`, like the built-in chain's STS call.

use std::time::{Duration, SystemTime};

use aws_config::BehaviorVersion;
use aws_credential_types::provider::{ProvideCredentials as _, SharedCredentialsProvider};
use aws_smithy_http_client::{Builder, Connector, proxy::ProxyConfig, tls};

use crate::aws::Credentials;
use crate::config::Password;
use crate::error::Result;
use crate::oauth::credentials_error;

/// The SDK's chain, built once per [`crate::aws::MskIam`] (the providers cache their
/// credentials and refresh them before they expire).
#[derive(Debug, Clone)]
pub(crate) struct SdkChain {
    provider: SharedCredentialsProvider,
}

impl SdkChain {
    /// The default chain for `profile` (else `AWS_PROFILE`, else `default`).
    pub(crate) async fn load(profile: Option<&str>) -> Result<SdkChain> {
        let http = Builder::new().build_with_connector_fn(|settings, _| {
            let mut b = Connector::builder().proxy_config(ProxyConfig::from_env());
            if let Some(s) = settings {
                b = b.connector_settings(s.clone());
            }
            b.tls_provider(tls::Provider::Rustls(
                tls::rustls_provider::CryptoMode::Ring,
            ))
            .build()
        });
        let mut l = aws_config::defaults(BehaviorVersion::latest()).http_client(http);
        if let Some(p) = profile {
            l = l.profile_name(p);
        }
        let config = l.load().await;
        let provider = config.credentials_provider().ok_or_else(|| {
            credentials_error(
                "AWS credentials",
                "the AWS SDK configured no credentials provider".into(),
                false,
            )
        })?;
        Ok(SdkChain { provider })
    }

    /// Credentials from the chain, and how long they may be used (`None`: no expiry).
    pub(crate) async fn credentials(&self) -> Result<(Credentials, Option<Duration>)> {
        let c = self.provider.provide_credentials().await.map_err(|e| {
            // The SDK's error says which providers it tried and why each gave nothing.
            let retriable = matches!(
                e,
                aws_credential_types::provider::error::CredentialsError::ProviderTimedOut(_)
                    | aws_credential_types::provider::error::CredentialsError::ProviderError(_)
            );
            credentials_error(
                "AWS credentials (AWS SDK default chain)",
                format!(
                    "{}; set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile \
                     (awsProfileName or AWS_PROFILE), a web identity, container or instance role",
                    error_chain(&e)
                ),
                retriable,
            )
        })?;
        let left = c
            .expiry()
            .map(|t| t.duration_since(SystemTime::now()).unwrap_or_default());
        Ok((
            Credentials {
                access_key_id: c.access_key_id().to_owned(),
                secret_access_key: Password::new(c.secret_access_key().to_owned()),
                session_token: c.session_token().map(|t| Password::new(t.to_owned())),
            },
            left,
        ))
    }
}

/// An error and its sources, `: `-separated (the SDK's top-level message alone is vague).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        next = cause.source();
    }
    out
}
