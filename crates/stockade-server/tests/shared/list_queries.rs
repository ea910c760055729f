//! The sandbox list's bad query parameters, shared by the Docker-backed and
//! the in-process tests: each query and the parameter its 400 must name.

pub const BAD_LIST_QUERIES: &[(&str, &str)] = &[
    ("per_page=0", "per_page"),
    ("per_page=1001", "per_page"),
    ("page=0", "page"),
    ("page=x", "page"),
    ("status=SLEEPING", "status"),
    ("is_active=maybe", "is_active"),
    ("labels=bad%20label", "labels"),
    ("team_id=x", "team_id"),
    ("name=", "name"),
    ("colour=red", "colour"),
];
