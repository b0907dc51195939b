//! The classifier: Meridio-2's resource model (distribution groups of
//! stable Maglev slots, ordered L3/L4 rules into them) on the XDP datapath.
//! [`model`] is what a source asks for, [`validate`] what the datapath
//! refuses, [`writer`] how the maps come to hold it ([`maps`], [`table`]).

pub mod admit;
pub mod maps;
pub mod model;
pub mod parse;
pub mod table;
pub mod validate;
pub mod writer;

pub use admit::RefusedObject;
pub use model::{
    ByteMatch, ClassifierSpec, GroupSpec, PortRange, RuleProto, RuleSpec, SctpHash, TargetSpec,
    table_size_for,
};
pub use writer::{Classifier, ClsReport};
