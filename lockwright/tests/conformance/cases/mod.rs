//! The cases, one file per operation. Each asserts outcomes (grants, refusals, reported
//! locks), never just "no panic". Time moves only through `cx.clock`.

case_files! {
    input,
    xlock,
    slock,
    unlock,
    status,
    renew,
    purge,
    renew_one,
    unlock_one,
    renew_many,
    fences,
    misc,
}
