//! The advice in error messages is exact: it names only fixes Strait supports and the grants
//! that work. One test per message (issue 18 item 5; the wording of the connection and ACL
//! messages is pinned next to them in strait-wire, the repeated-error lines in `mirror.rs`).
#![allow(clippy::unwrap_used)]

#[test]
fn an_oversized_record_offers_only_a_fix_strait_has() {
    let m = strait_forward::CodecError::RecordTooLarge {
        offset: 42,
        size: 2_000_012,
        limit: 1_048_588,
    }
    .to_string();
    assert_eq!(
        m,
        "the record at source offset 42 needs a 2000012-byte batch, more than the target limit \
         of 1048588 bytes; raise max.message.bytes on the target topic"
    );
    // Strait has no record filtering.
    assert!(!m.contains("filter"), "{m}");
}

#[test]
fn acl_advice_names_the_principal_the_broker_sees() {
    let e = strait_wire::Error::Authorization {
        code: strait_wire::ResponseError::TopicAuthorizationFailed,
        principal: Some("CN=my-us-user".into()),
        operation: "Write".into(),
        resource: "Topic:my-topic".into(),
    };
    let m = e.to_string();
    assert!(
        m.contains("--allow-principal User:CN=my-us-user --operation Write --topic my-topic"),
        "{m}"
    );
    assert!(!m.contains("<principal of"), "{m}");
}
