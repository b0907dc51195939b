//! Whole-template table tests. Every expected output below was produced by
//! Go 1.26 text/template (missingkey=zero, "<no value>" removed as Helm does)
//! with hand-written copies of Sprig's include/nindent/indent/quote/default/
//! required, by a scratch program outside the repository. Error cases expect
//! this crate's `file:line: reason` form at the line Go reported.

use crate::{Templates, Value};

struct Case {
    name: &'static str,
    defs: &'static str,
    tmpl: &'static str,
    data: &'static str,
    want: Result<&'static str, &'static str>,
}

const CASES: &[Case] = &[
    Case {
        name: "trim_if",
        defs: r##""##,
        tmpl: r##"a:
  {{- if .on }}
  b: 1
  {{- end }}
c: 2
"##,
        data: r##"{"on":true}"##,
        want: Ok(r##"a:
  b: 1
c: 2
"##),
    },
    Case {
        name: "trim_if_false",
        defs: r##""##,
        tmpl: r##"a:
  {{- if .on }}
  b: 1
  {{- end }}
c: 2
"##,
        data: r##"{"on":false}"##,
        want: Ok(r##"a:
c: 2
"##),
    },
    Case {
        name: "trim_right",
        defs: r##""##,
        tmpl: r##"x {{ 1 -}}   

  y {{- 2 }} z"##,
        data: r##"{}"##,
        want: Ok(r##"x 1y2 z"##),
    },
    Case {
        name: "range_list",
        defs: r##""##,
        tmpl: r##"items:
{{- range $i, $v := .l }}
- {{ $i }}: {{ $v }}
{{- end }}
"##,
        data: r##"{"l":["a",2,1.5,true,null]}"##,
        want: Ok(r##"items:
- 0: a
- 1: 2
- 2: 1.5
- 3: true
- 4: 
"##),
    },
    Case {
        name: "range_map_sorted",
        defs: r##""##,
        tmpl: r##"{{ range $k, $v := .m }}{{ $k }}={{ $v }};{{ end }}"##,
        data: r##"{"m":{"zeta":1,"alpha":2,"Mid":3,"beta":{"x":1}}}"##,
        want: Ok(r##"Mid=3;alpha=2;beta=map[x:1];zeta=1;"##),
    },
    Case {
        name: "range_else",
        defs: r##""##,
        tmpl: r##"{{ range .none }}x{{ else }}empty{{ end }}|{{ range .l }}{{ . }}{{ else }}no{{ end }}"##,
        data: r##"{"l":[]}"##,
        want: Ok(r##"empty|no"##),
    },
    Case {
        name: "range_break_continue",
        defs: r##""##,
        tmpl: r##"{{ range .l }}{{ if eq . 2.0 }}{{ continue }}{{ end }}{{ if eq . 4.0 }}{{ break }}{{ end }}{{ . }},{{ end }}"##,
        data: r##"{"l":[1,2,3,4,5]}"##,
        want: Ok(r##"1,3,"##),
    },
    Case {
        name: "range_dot_single_var",
        defs: r##""##,
        tmpl: r##"{{ range $v := .l }}[{{ $v }}{{ . }}]{{ end }}"##,
        data: r##"{"l":["a","b"]}"##,
        want: Ok(r##"[aa][bb]"##),
    },
    Case {
        name: "var_scope",
        defs: r##""##,
        tmpl: r##"{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ $y := 3 }}{{ $y }}{{ end }}{{ $x }}{{ range .l }}{{ $x = . }}{{ end }}{{ $x }}"##,
        data: r##"{"l":["p","q"]}"##,
        want: Ok(r##"32q"##),
    },
    Case {
        name: "with_else",
        defs: r##""##,
        tmpl: r##"{{ with .a }}A={{ .b }}{{ else with .c }}C={{ . }}{{ else }}none{{ end }}"##,
        data: r##"{"c":"cv"}"##,
        want: Ok(r##"C=cv"##),
    },
    Case {
        name: "with_dollar",
        defs: r##""##,
        tmpl: r##"{{ with .a }}{{ .b }}/{{ $.top }}{{ end }}"##,
        data: r##"{"a":{"b":"B"},"top":"T"}"##,
        want: Ok(r##"B/T"##),
    },
    Case {
        name: "else_if_chain",
        defs: r##""##,
        tmpl: r##"{{ range .l }}{{ if eq . "a" }}A{{ else if eq . "b" }}B{{ else if eq . "c" }}C{{ else }}?{{ end }}{{ end }}"##,
        data: r##"{"l":["a","b","c","d"]}"##,
        want: Ok(r##"ABC?"##),
    },
    Case {
        name: "missing_keys",
        defs: r##""##,
        tmpl: r##"[{{ .nope }}][{{ .m.nope }}][{{ index .m "nope" }}][{{ print .nope }}][{{ printf "%v" .nope }}]"##,
        data: r##"{"m":{}}"##,
        want: Ok(r##"[][][][<nil>][<nil>]"##),
    },
    Case {
        name: "nil_field_error",
        defs: r##""##,
        tmpl: r##"line1
{{ .a.b }}"##,
        data: r##"{}"##,
        want: Err(r##"main:2: nil pointer evaluating interface {}.b"##),
    },
    Case {
        name: "null_value",
        defs: r##""##,
        tmpl: r##"[{{ .n }}][{{ if .n }}t{{ else }}f{{ end }}]"##,
        data: r##"{"n":null}"##,
        want: Ok(r##"[][f]"##),
    },
    Case {
        name: "default_empties",
        defs: r##""##,
        tmpl: r##"{{ default "d" .zero }} {{ default "d" .emptys }} {{ default "d" .f }} {{ default "d" .missing }} {{ default "d" .one }} {{ default "d" .s }}"##,
        data: r##"{"zero":0,"emptys":"","f":false,"one":1,"s":"x"}"##,
        want: Ok(r##"d d d d 1 x"##),
    },
    Case {
        name: "quote_values",
        defs: r##""##,
        tmpl: r##"{{ quote .port }} {{ .name | quote }} {{ quote 3 }} {{ quote .big }} {{ quote "a\"b\n" }} {{ quote .missing }}"##,
        data: r##"{"port":8080,"name":"web","big":1000000}"##,
        want: Ok(r##""8080" "web" "3" "1e+06" "a\"b\n" "##),
    },
    Case {
        name: "floats",
        defs: r##""##,
        tmpl: r##"{{ .a }} {{ .b }} {{ .c }} {{ .d }} {{ .e }} {{ .f }} {{ 1.5 }} {{ 3 }} {{ 1e3 }}"##,
        data: r##"{"a":1000000,"b":65537,"c":1.5,"d":1e21,"e":0.0001,"f":0.00001}"##,
        want: Ok(r##"1e+06 65537 1.5 1e+21 0.0001 1e-05 1.5 3 1000"##),
    },
    Case {
        name: "print_composites",
        defs: r##""##,
        tmpl: r##"{{ .l }} {{ .m }} {{ true }} {{ print 1 2 "x" 3 }}{{ println "a" 1 }}"##,
        data: r##"{"l":[1,"a",null,[2]],"m":{"b":1,"a":{"c":[]}}}"##,
        want: Ok(r##"[1 a <nil> [2]] map[a:map[c:[]] b:1] true 1 2x3a 1
"##),
    },
    Case {
        name: "printf_verbs",
        defs: r##""##,
        tmpl: r##"{{ printf "%s-%d-%v-%q-%%" "a" 3 .f "q" }} {{ printf "%d" .f }} {{ printf "%s" }}"##,
        data: r##"{"f":8080}"##,
        want: Ok(r##"a-3-8080-"q"-% %!d(float64=8080) %!s(MISSING)"##),
    },
    Case {
        name: "define_include_nindent",
        defs: r##"{{- define "labels" -}}
app: {{ .name }}
{{ include "extra" . }}
{{- end -}}
{{- define "extra" -}}
tier: {{ .tier | default "web" }}
{{- end }}"##,
        tmpl: r##"metadata:
  labels:
    {{- include "labels" . | nindent 4 }}
spec:
  template: {{- include "labels" . | nindent 4 }}
"##,
        data: r##"{"name":"rivora"}"##,
        want: Ok(r##"metadata:
  labels:
    app: rivora
    tier: web
spec:
  template:
    app: rivora
    tier: web
"##),
    },
    Case {
        name: "template_action",
        defs: r##"{{ define "t" }}[{{ . }}]{{ end }}"##,
        tmpl: r##"{{ template "t" .x }}{{ template "t" }}"##,
        data: r##"{"x":"X"}"##,
        want: Ok(r##"[X][]"##),
    },
    Case {
        name: "and_or",
        defs: r##""##,
        tmpl: r##"{{ and 1 0 2 }} {{ and 1 2 }} {{ or 0 "" "x" }} {{ or 0 "" }} {{ and 0 .nope.x }} {{ or 1 .nope.x }} {{ not .e }} {{ .v | or 0 }}"##,
        data: r##"{"e":"","v":"piped"}"##,
        want: Ok(r##"0 2 x  0 1 true piped"##),
    },
    Case {
        name: "comparisons",
        defs: r##""##,
        tmpl: r##"{{ eq 1 1 }} {{ eq "a" "b" "a" }} {{ ne .p 80.0 }} {{ lt 1 2 }} {{ ge .p 8080.0 }} {{ eq .missing nil }} {{ eq .s "x" }}"##,
        data: r##"{"p":8080,"s":"x"}"##,
        want: Ok(r##"true true true true true true true"##),
    },
    Case {
        name: "compare_mixed_error",
        defs: r##""##,
        tmpl: r##"

{{ eq .p 8080 }}"##,
        data: r##"{"p":8080}"##,
        want: Err(
            r##"main:3: error calling eq: incompatible types for comparison: float64 and int"##,
        ),
    },
    Case {
        name: "len_index",
        defs: r##""##,
        tmpl: r##"{{ len .l }} {{ len .m }} {{ len "héllo" }} {{ index .l 1 }} {{ index .m "k" }} {{ index .n 0 1 }}"##,
        data: r##"{"l":["a","b"],"m":{"k":"v"},"n":[[1,2]]}"##,
        want: Ok(r##"2 1 6 b v 2"##),
    },
    Case {
        name: "paren_chain",
        defs: r##""##,
        tmpl: r##"{{ (index .l 0).name }} {{ $x := index .l 0 }}{{ $x.name }}"##,
        data: r##"{"l":[{"name":"n0"}]}"##,
        want: Ok(r##"n0 n0"##),
    },
    Case {
        name: "comments",
        defs: r##""##,
        tmpl: r##"a
{{- /* comment */}}
b {{/* c2 */}} c
{{- /* multi
line */ -}}
  d"##,
        data: r##"{}"##,
        want: Ok(r##"a
b  cd"##),
    },
    Case {
        name: "raw_string",
        defs: r##""##,
        tmpl: r##"{{ `raw\n{{x}}` }}|{{ "esc\t\u00e9" }}"##,
        data: r##"{}"##,
        want: Ok(r##"raw\n{{x}}|esc	é"##),
    },
    Case {
        name: "required_error",
        defs: r##""##,
        tmpl: r##"a
b: {{ required "rivorad.interface must be set" .Values.x }}"##,
        data: r##"{"Values":{}}"##,
        want: Err(r##"main:2: required value: rivorad.interface must be set"##),
    },
    Case {
        name: "undefined_function",
        defs: r##""##,
        tmpl: r##"x

{{ foo 1 }}"##,
        data: r##"{}"##,
        want: Err(r##"main:3: function "foo" not defined"##),
    },
    Case {
        name: "nested_range_vars",
        defs: r##""##,
        tmpl: r##"{{ range $a := .outer }}{{ range $b := $.inner }}{{ $a }}{{ $b }} {{ end }}{{ end }}"##,
        data: r##"{"outer":["x","y"],"inner":[1,2]}"##,
        want: Ok(r##"x1 x2 y1 y2 "##),
    },
    Case {
        name: "range_int",
        defs: r##""##,
        tmpl: r##"{{ range 3 }}{{ . }}{{ end }}"##,
        data: r##"{}"##,
        want: Ok(r##"012"##),
    },
    Case {
        name: "if_decl_scope",
        defs: r##""##,
        tmpl: r##"{{ if $v := .a }}{{ $v }}{{ else }}no {{ $v }}{{ end }}"##,
        data: r##"{"a":0}"##,
        want: Ok(r##"no 0"##),
    },
    Case {
        name: "yaml_like_block",
        defs: r##""##,
        tmpl: r##"spec:
  {{- with .ports }}
  ports:
    {{- range . }}
    - name: {{ .name }}
      port: {{ .port }}
    {{- end }}
  {{- end }}
"##,
        data: r##"{"ports":[{"name":"http","port":80},{"name":"https","port":443}]}"##,
        want: Ok(r##"spec:
  ports:
    - name: http
      port: 80
    - name: https
      port: 443
"##),
    },
];

fn render(defs: &str, tmpl: &str, data: &str) -> Result<String, String> {
    let json: serde_json::Value = serde_json::from_str(data).map_err(|e| e.to_string())?;
    let mut t = Templates::new();
    if !defs.is_empty() {
        t.add("defs", defs).map_err(|e| e.to_string())?;
    }
    t.add("main", tmpl).map_err(|e| e.to_string())?;
    t.render("main", &Value::from_json_helm(&json))
        .map_err(|e| e.to_string())
}

#[test]
fn templates_render_like_go() {
    let mut failures = Vec::new();
    for c in CASES {
        let got = render(c.defs, c.tmpl, c.data);
        let want = c.want.map(str::to_string).map_err(str::to_string);
        if got != want {
            failures.push(format!("{}:\n  got  {got:?}\n  want {want:?}", c.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}
