//! The cases, one file per operation. Each asserts outcomes (grants, refusals, reported
//! locks), never just "no panic". Time moves only through `cx.clock`.

case_files! {
    input => __conformance_input,
    xlock => __conformance_xlock,
    slock => __conformance_slock,
    unlock => __conformance_unlock,
    status => __conformance_status,
    renew => __conformance_renew,
    purge => __conformance_purge,
    renew_one => __conformance_renew_one,
    unlock_one => __conformance_unlock_one,
    renew_many => __conformance_renew_many,
    fences => __conformance_fences,
    misc => __conformance_misc,
    grace => __conformance_grace,
    queue => __conformance_queue,
    fresh => __conformance_fresh,
    news => __conformance_news,
}
