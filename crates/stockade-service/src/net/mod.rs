pub mod egress;
pub mod outbound;
