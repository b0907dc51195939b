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
        want: Err(r##"main:2: at <.a.b>: nil pointer evaluating interface {}.b"##),
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
    Case {
        name: "with_assign_outer",
        defs: r##""##,
        tmpl: r##"{{ $x := 1 }}{{ with .a }}{{ $x = 2 }}{{ end }}{{ $x }}"##,
        data: r##"{"a":true}"##,
        want: Ok(r##"2"##),
    },
    Case {
        name: "range_map_one_var",
        defs: r##""##,
        tmpl: r##"{{ range $v := .m }}{{ $v }},{{ end }}{{ range .m }}{{ . }};{{ end }}"##,
        data: r##"{"m":{"b":2,"a":1}}"##,
        want: Ok(r##"1,2,1;2;"##),
    },
    Case {
        name: "trim_at_start_and_end",
        defs: r##""##,
        tmpl: r##"  
{{- "x" -}}
  "##,
        data: r##"{}"##,
        want: Ok(r##"x"##),
    },
    Case {
        name: "printf_composites",
        defs: r##""##,
        tmpl: r##"{{ printf "%s|%v|%d" .l .m .n }}"##,
        data: r##"{"l":["a","b"],"m":{"k":"v"},"n":[1]}"##,
        want: Ok(r##"[a b]|map[k:v]|[%!d(float64=1)]"##),
    },
    Case {
        name: "index_nested",
        defs: r##""##,
        tmpl: r##"{{ index .m "a" "b" }}"##,
        data: r##"{"m":{"a":{"b":"deep"}}}"##,
        want: Ok(r##"deep"##),
    },
    Case {
        name: "field_on_list_error",
        defs: r##""##,
        tmpl: r##"{{ .a.b }}"##,
        data: r##"{"a":[1]}"##,
        want: Err(r##"main:1: at <.a.b>: can't evaluate field b in type interface {}"##),
    },
    Case {
        name: "and_guards_nil",
        defs: r##""##,
        tmpl: r##"{{ if and .a (eq .a.b "x") }}yes{{ else }}no{{ end }}"##,
        data: r##"{}"##,
        want: Ok(r##"no"##),
    },
    Case {
        name: "dollar_print",
        defs: r##""##,
        tmpl: r##"{{ $ }}"##,
        data: r##"{"b":[1,2],"a":"x"}"##,
        want: Ok(r##"map[a:x b:[1 2]]"##),
    },
    Case {
        name: "piped_printf",
        defs: r##""##,
        tmpl: r##"{{ "a" | printf "%s-%s" "b" }}"##,
        data: r##"{}"##,
        want: Ok(r##"b-a"##),
    },
    Case {
        name: "comma_join_range",
        defs: r##""##,
        tmpl: r##"{{ range $i, $e := .l }}{{ if $i }}, {{ end }}{{ $e }}{{ end }}"##,
        data: r##"{"l":["a","b","c"]}"##,
        want: Ok(r##"a, b, c"##),
    },
    Case {
        name: "nested_define_include_indent",
        defs: r##"{{- define "inner" -}}
k: v
list:
- 1
{{- end -}}
{{- define "outer" -}}
outer:
  {{- include "inner" . | nindent 2 }}
{{- end -}}"##,
        tmpl: r##"root:
  {{- include "outer" . | nindent 2 }}
after: {{ include "inner" . | indent 2 }}
"##,
        data: r##"{}"##,
        want: Ok(r##"root:
  outer:
    k: v
    list:
    - 1
after:   k: v
  list:
  - 1
"##),
    },
    Case {
        name: "if_else_trim_newlines",
        defs: r##""##,
        tmpl: r##"a: 1
{{- if .x }}
b: 2
{{- else }}
b: 3
{{- end }}
{{- /* trailing */}}
c: 4
"##,
        data: r##"{"x":false}"##,
        want: Ok(r##"a: 1
b: 3
c: 4
"##),
    },
    Case {
        name: "bool_and_string_compare_error",
        defs: r##""##,
        tmpl: r##"{{ eq .b "true" }}"##,
        data: r##"{"b":true}"##,
        want: Err(
            r##"main:1: error calling eq: incompatible types for comparison: bool and string"##,
        ),
    },
    Case {
        name: "default_piped_chain",
        defs: r##""##,
        tmpl: r##"{{ .Values.tag | default .Chart.AppVersion | quote }}"##,
        data: r##"{"Values":{"tag":""},"Chart":{"AppVersion":"1.2.3"}}"##,
        want: Ok(r##""1.2.3""##),
    },
    Case {
        name: "range_else_with_vars",
        defs: r##""##,
        tmpl: r##"{{ range $k, $v := .m }}{{ $k }}{{ else }}none{{ end }}"##,
        data: r##"{"m":{}}"##,
        want: Ok(r##"none"##),
    },
    Case {
        name: "negative_and_small_floats",
        defs: r##""##,
        tmpl: r##"{{ .a }} {{ .b }} {{ .c }} {{ .d }}"##,
        data: r##"{"a":-1.5,"b":-1000000,"c":123456789,"d":0.1}"##,
        want: Ok(r##"-1.5 -1e+06 1.23456789e+08 0.1"##),
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

fn values(j: serde_json::Value) -> Value {
    Value::from_json_helm(&j)
}

fn chart(files: &[(&str, &str)]) -> Templates {
    let mut t = Templates::new();
    for (name, src) in files {
        if let Err(e) = t.add(name, src) {
            panic!("{name} does not parse: {e}");
        }
    }
    t
}

const HELPERS: &str = r#"{{/* Common labels */}}
{{- define "rivora.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end }}

{{- define "rivora.iface" -}}
{{ required "rivorad.interface must be set" .Values.rivorad.interface }}
{{- end }}
"#;

const DAEMONSET: &str = r#"apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ .Release.Name }}-rivorad
  labels:
    {{- include "rivora.labels" . | nindent 4 }}
spec:
  template:
    spec:
      {{- with .Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: rivorad
          args: ["--interface={{ include "rivora.iface" . }}", "--port={{ .Values.port }}"]
          resources: {{- toYaml .Values.resources | nindent 12 }}
          env:
            {{- range $k, $v := .Values.env }}
            - name: {{ $k }}
              value: {{ $v | quote }}
            {{- end }}
"#;

fn chart_values(iface: serde_json::Value) -> Value {
    values(serde_json::json!({
        "Chart": {"Name": "rivora"},
        "Release": {"Name": "lb"},
        "Values": {
            "rivorad": {"interface": iface},
            "port": 9090,
            "nodeSelector": {"kubernetes.io/os": "linux", "role": "yes"},
            "resources": {"limits": {"cpu": "100m", "memory": "128Mi"}, "requests": {"cpu": 0.5}},
            "env": {"RUST_LOG": "info", "A_FIRST": 1000000},
        },
    }))
}

#[test]
fn helm_style_chart_renders_to_the_expected_objects() {
    let t = chart(&[
        ("templates/_helpers.tpl", HELPERS),
        ("templates/daemonset.yaml", DAEMONSET),
    ]);
    let out = t
        .render(
            "templates/daemonset.yaml",
            &chart_values(serde_json::json!("eth0")),
        )
        .unwrap_or_else(|e| panic!("renders: {e}"));
    let got: serde_json::Value =
        serde_norway::from_str(&out).unwrap_or_else(|e| panic!("not YAML: {e}\n{out}"));
    let want = serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "lb-rivorad", "labels": {"app.kubernetes.io/name": "rivora", "app.kubernetes.io/instance": "lb"}},
        "spec": {"template": {"spec": {
            "nodeSelector": {"kubernetes.io/os": "linux", "role": "yes"},
            "containers": [{
                "name": "rivorad",
                "args": ["--interface=eth0", "--port=9090"],
                "resources": {"limits": {"cpu": "100m", "memory": "128Mi"}, "requests": {"cpu": 0.5}},
                // Sorted keys; a values number prints with Go %v, so 1e+06.
                "env": [{"name": "A_FIRST", "value": "1e+06"}, {"name": "RUST_LOG", "value": "info"}],
            }],
        }}},
    });
    assert_eq!(got, want, "rendered:\n{out}");
    assert!(
        out.contains("        role: \"yes\"\n"),
        "YAML 1.1 boolean words stay strings:\n{out}"
    );
}

#[test]
fn errors_name_the_file_and_line_of_the_failing_action() {
    let t = chart(&[
        ("templates/_helpers.tpl", HELPERS),
        ("templates/daemonset.yaml", DAEMONSET),
    ]);
    let err = t
        .render(
            "templates/daemonset.yaml",
            &chart_values(serde_json::json!("")),
        )
        .expect_err("empty interface is refused");
    assert_eq!(
        err.to_string(),
        "templates/_helpers.tpl:8: required value: rivorad.interface must be set"
    );
    assert!(matches!(err, crate::Error::Required { .. }));

    let mut t = Templates::new();
    let src = "a: 1\n".repeat(11) + "b: {{ foo .x }}\n";
    let err = t
        .add("templates/daemonset.yaml", &src)
        .expect_err("foo is unknown");
    assert_eq!(
        err.to_string(),
        "templates/daemonset.yaml:12: function \"foo\" not defined"
    );

    let t = chart(&[
        ("x.yaml", "ok\n{{ fail \"bad config\" }}"),
        ("y.yaml", "{{ .s.field }}"),
    ]);
    assert_eq!(
        t.render("x.yaml", &Value::Nil).map_err(|e| e.to_string()),
        Err("x.yaml:2: bad config".to_string())
    );
    assert_eq!(
        t.render("y.yaml", &values(serde_json::json!({"s": "str"})))
            .map_err(|e| e.to_string()),
        Err("y.yaml:1: at <.s.field>: can't evaluate field field in type interface {}".to_string())
    );
    assert_eq!(
        t.render("nope.yaml", &Value::Nil),
        Err(crate::Error::NoTemplate("nope.yaml".into()))
    );
    let t = chart(&[("z.yaml", "\n{{ include \"missing\" . }}")]);
    assert_eq!(
        t.render("z.yaml", &Value::Nil).map_err(|e| e.to_string()),
        Err("z.yaml:2: error calling include: no template \"missing\" defined".to_string())
    );
}

#[test]
fn defines_are_shared_and_overridden_like_helm() {
    let t = chart(&[
        (
            "a.tpl",
            "{{ define \"n\" }}first{{ end }}{{ define \"keep\" }}kept{{ end }}",
        ),
        ("b.yaml", "{{ include \"n\" . }} {{ include \"keep\" . }}"),
        (
            "c.tpl",
            "{{ define \"n\" }}second{{ end }}{{ define \"keep\" }}  {{ end }}",
        ),
    ]);
    assert_eq!(
        t.render("b.yaml", &Value::Nil),
        Ok("second kept".to_string())
    );
}

#[test]
fn files_get_returns_content_or_empty() {
    let mut files = std::collections::BTreeMap::new();
    files.insert("config/rivora.yaml".to_string(), "a: 1\nb: 2".to_string());
    let mut data = std::collections::BTreeMap::new();
    data.insert("Files".to_string(), Value::Files(files));
    let t = chart(&[(
        "cm.yaml",
        "data:\n  rivora.yaml: |-\n    {{- .Files.Get \"config/rivora.yaml\" | nindent 4 }}\n  none: {{ $.Files.Get \"nope\" | quote }}",
    )]);
    assert_eq!(
        t.render("cm.yaml", &Value::Map(data)),
        Ok("data:\n  rivora.yaml: |-\n    a: 1\n    b: 2\n  none: \"\"".to_string())
    );
}

#[test]
fn to_yaml_under_nindent_and_to_json() {
    let t = chart(&[(
        "t.yaml",
        "spec:\n  tolerations: {{- toYaml .tol | nindent 4 }}\n  empty: {{ toYaml .none }}\n  json: {{ toJson .tol | squote }}",
    )]);
    let data = values(
        serde_json::json!({"tol": [{"key": "a", "operator": "Exists"}, {"effect": "NoSchedule", "seconds": 30}]}),
    );
    assert_eq!(
        t.render("t.yaml", &data),
        Ok("spec:\n  tolerations:\n    - key: a\n      operator: Exists\n    - effect: NoSchedule\n      seconds: 30\n  empty: null\n  json: '[{\"key\":\"a\",\"operator\":\"Exists\"},{\"effect\":\"NoSchedule\",\"seconds\":30}]'".to_string())
    );
}

#[test]
fn sprig_helpers_in_templates() {
    let t = chart(&[(
        "s.yaml",
        r#"{{ $d := dict "b" 2 "a" (list 1 "x") }}{{ toJson $d }} {{ hasKey $d "a" }} {{ join "," (list "p" .v 3) }} {{ .v | int }} {{ 1000000.0 | int }} {{ trunc 5 (printf "%s-%s" "rivora" "controller") }} {{ "A-b" | lower | replace "-" "_" | upper }} {{ ternary "y" "n" (empty .missing) }} {{ coalesce .missing "" "c" }} {{ tpl "{{ .v }}!" . }} {{ "  sp " | trim | b64enc }} {{ contains "iv" "rivora" }} {{ trimPrefix "ri" "rivora" }} {{ toString 2.5 }}"#,
    )]);
    assert_eq!(
        t.render("s.yaml", &values(serde_json::json!({"v": 8080}))),
        Ok(r#"{"a":[1,"x"],"b":2} true p,8080,3 8080 1000000 rivor A_B y c 8080! c3A= true vora 2.5"#.to_string())
    );
}

#[test]
fn runaway_include_recursion_is_an_error_not_a_crash() {
    let t = chart(&[
        (
            "loop.tpl",
            "{{ define \"l\" }}{{ include \"l\" . }}{{ end }}",
        ),
        ("m.yaml", "{{ include \"l\" . }}"),
    ]);
    let err = t
        .render("m.yaml", &Value::Nil)
        .expect_err("recursion is bounded");
    assert!(
        err.to_string()
            .starts_with("loop.tpl:1: rendering template has a nested reference name: l"),
        "{err}"
    );
}

/// Random token soup must produce `Ok` or a located `Err`, never a panic.
#[test]
fn arbitrary_input_never_panics() {
    const PIECES: &[&str] = &[
        "{{", "}}", "{{- ", " -}}", "/*", "*/", " ", "\n", ".", ".a", ".b", "$", "$x", ":=", "=",
        "|", "(", ")", "\"s\"", "`r`", "'c'", "1", "-2", "1.5e3", "0x1f", "if", "else", "end",
        "range", "with", "define", "template", "break", "continue", "include", "quote", "nindent",
        "printf", "index", "eq", "and", "nil", "true", "é", ",", "\"\\q\"", "\"", "`", "'",
    ];
    let data = values(serde_json::json!({"a": {"b": [1, 2]}, "b": "x"}));
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut ok = 0usize;
    let mut errors = 0usize;
    for _ in 0..3000 {
        let mut src = String::new();
        for _ in 0..(seed % 24) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            src.push_str(PIECES[(seed % PIECES.len() as u64) as usize]);
        }
        let mut t = Templates::new();
        let result = t
            .add("fuzz.yaml", &src)
            .and_then(|()| t.render("fuzz.yaml", &data));
        match result {
            Ok(_) => ok += 1,
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.starts_with("fuzz.yaml:"),
                    "error without location for {src:?}: {msg}"
                );
                errors += 1;
            }
        }
    }
    assert_eq!(ok + errors, 3000);
    assert!(
        ok > 0 && errors > 0,
        "the soup should hit both paths: ok={ok} errors={errors}"
    );
}
