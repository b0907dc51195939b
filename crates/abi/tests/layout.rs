//! Checks the Rust mirror against the C header, through the BTF clang emits
//! for `bpf/abi_btf.c`: every `rv_*` struct must be mirrored with the same
//! size and field offsets, and every enum constant must have the same value.

use std::collections::BTreeMap;

use object::{Object, ObjectSection};

const BTF_KIND_INT: u32 = 1;
const BTF_KIND_ARRAY: u32 = 3;
const BTF_KIND_STRUCT: u32 = 4;
const BTF_KIND_UNION: u32 = 5;
const BTF_KIND_ENUM: u32 = 6;
const BTF_KIND_FUNC_PROTO: u32 = 13;
const BTF_KIND_VAR: u32 = 14;
const BTF_KIND_DATASEC: u32 = 15;
const BTF_KIND_DECL_TAG: u32 = 17;
const BTF_KIND_ENUM64: u32 = 19;

#[derive(Debug, Default)]
struct CStruct {
    size: usize,
    /// field name -> byte offset
    fields: BTreeMap<String, usize>,
}

struct CAbi {
    structs: BTreeMap<String, CStruct>,
    enumerators: BTreeMap<String, i64>,
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn parse_btf(btf: &[u8]) -> CAbi {
    assert_eq!(
        u16::from_le_bytes([btf[0], btf[1]]),
        0xeb9f,
        "BTF magic (little-endian)"
    );
    let hdr_len = u32_at(btf, 4) as usize;
    let type_off = u32_at(btf, 8) as usize;
    let type_len = u32_at(btf, 12) as usize;
    let str_off = u32_at(btf, 16) as usize;
    let types = &btf[hdr_len + type_off..hdr_len + type_off + type_len];
    let strings = &btf[hdr_len + str_off..];
    let name = |off: u32| -> String {
        let s = &strings[off as usize..];
        let end = s.iter().position(|&c| c == 0).unwrap();
        String::from_utf8(s[..end].to_vec()).unwrap()
    };

    let mut abi = CAbi {
        structs: BTreeMap::new(),
        enumerators: BTreeMap::new(),
    };
    let mut pos = 0;
    while pos < types.len() {
        let name_off = u32_at(types, pos);
        let info = u32_at(types, pos + 4);
        let size_or_type = u32_at(types, pos + 8);
        let vlen = (info & 0xffff) as usize;
        let kind = (info >> 24) & 0x1f;
        let kflag = info >> 31 == 1;
        pos += 12;
        match kind {
            BTF_KIND_INT | BTF_KIND_VAR | BTF_KIND_DECL_TAG => pos += 4,
            BTF_KIND_ARRAY => pos += 12,
            BTF_KIND_STRUCT | BTF_KIND_UNION => {
                let mut s = CStruct {
                    size: size_or_type as usize,
                    ..Default::default()
                };
                for m in 0..vlen {
                    let at = pos + m * 12;
                    let mname = name(u32_at(types, at));
                    let raw = u32_at(types, at + 8);
                    let bits = if kflag { raw & 0xff_ffff } else { raw };
                    assert_eq!(bits % 8, 0, "bitfield {mname} in ABI struct");
                    s.fields.insert(mname, (bits / 8) as usize);
                }
                pos += vlen * 12;
                if kind == BTF_KIND_STRUCT && name_off != 0 {
                    abi.structs.insert(name(name_off), s);
                }
            }
            BTF_KIND_ENUM => {
                for m in 0..vlen {
                    let at = pos + m * 8;
                    let v = u32_at(types, at + 4) as i32 as i64;
                    abi.enumerators.insert(name(u32_at(types, at)), v);
                }
                pos += vlen * 8;
            }
            BTF_KIND_ENUM64 => {
                for m in 0..vlen {
                    let at = pos + m * 12;
                    let v = (u32_at(types, at + 4) as u64 | ((u32_at(types, at + 8) as u64) << 32))
                        as i64;
                    abi.enumerators.insert(name(u32_at(types, at)), v);
                }
                pos += vlen * 12;
            }
            BTF_KIND_FUNC_PROTO => pos += vlen * 8,
            BTF_KIND_DATASEC => pos += vlen * 12,
            // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG
            _ => {}
        }
    }
    abi
}

fn c_abi() -> CAbi {
    let elf = std::fs::read(concat!(env!("OUT_DIR"), "/abi_btf.o")).unwrap();
    let obj = object::File::parse(&*elf).unwrap();
    let btf = obj
        .section_by_name(".BTF")
        .expect(".BTF section (compile with -g)");
    parse_btf(btf.data().unwrap())
}

#[test]
fn every_struct_matches_the_c_header() {
    let c = c_abi();
    let rust = rivora_abi::layouts();
    for l in &rust {
        let cs = c
            .structs
            .get(l.c_name)
            .unwrap_or_else(|| panic!("struct {} not in the C header", l.c_name));
        assert_eq!(cs.size, l.size, "size of struct {}", l.c_name);
        let rust_fields: BTreeMap<String, usize> =
            l.fields.iter().map(|(n, o)| (n.to_string(), *o)).collect();
        assert_eq!(
            cs.fields, rust_fields,
            "fields and offsets of struct {}",
            l.c_name
        );
    }
    // Every ABI struct of the header must have a mirror (rv_abi_all is the
    // BTF anchor of abi_btf.c, not part of the ABI).
    for name in c
        .structs
        .keys()
        .filter(|n| n.starts_with("rv_") && *n != "rv_abi_all")
    {
        assert!(
            rust.iter().any(|l| l.c_name == name),
            "struct {name} has no Rust mirror in crates/abi"
        );
    }
}

#[test]
fn every_constant_matches_the_c_header() {
    let c = c_abi();
    let rust = rivora_abi::constants();
    for (name, value) in &rust {
        assert_eq!(c.enumerators.get(*name), Some(value), "constant {name}");
    }
    for name in c.enumerators.keys() {
        assert!(
            rust.iter().any(|(n, _)| n == name),
            "enumerator {name} has no Rust mirror in crates/abi"
        );
    }
}

#[test]
fn the_checker_sees_a_real_layout() {
    // Guards the test itself: the parser must find known facts of the header.
    let c = c_abi();
    assert_eq!(c.structs["rv_flow6"].size, 40);
    assert_eq!(c.structs["rv_flow6"].fields["proto"], 36);
    assert_eq!(c.enumerators["RV_MAX_BACKENDS"], 8192);
    // rivora-decap's layouts are part of the same header and checked alike.
    assert_eq!(c.structs["rv_decap_stats"].size, 32);
    assert_eq!(c.structs["rv_decap_stats"].fields["fragments"], 24);
    assert_eq!(c.enumerators["RV_DECAP_KIND_COUNT"], 4);
}
