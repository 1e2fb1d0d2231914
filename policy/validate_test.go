package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// ep wraps endpoint lines (each indented 8 spaces, the first after "- ")
// into a policy "p" with one binary. Endpoint lines start at line 5.
func epPolicy(lines ...string) string {
	return "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - " + strings.Join(lines, "\n        ") + "\n    binaries: [{path: /usr/bin/curl}]\n"
}

// TestValidateOpenShell: OpenShell's load-time checks (crates/openshell-
// policy at 2f7fb65), one row per OpenShell test it derives from. want nil
// means the policy loads.
func TestValidateOpenShell(t *testing.T) {
	cases := []struct {
		name string // the OpenShell test
		src  string
		want []at
	}{
		// Process identity.
		{"lib.rs: validate_rejects_root_run_as_user", "version: 1\nprocess: {run_as_user: root, run_as_group: sandbox}\n",
			[]at{{2, "root", `process.run_as_user: "root" is not allowed`}}},
		{"lib.rs: validate_rejects_uid_zero", "version: 1\nprocess:\n  run_as_user: \"0\"\n  run_as_group: 0\n",
			[]at{{3, `"0"`, "process.run_as_user"}, {4, "0", "process.run_as_group"}}},
		{"lib.rs: validate_rejects_nobody_string", "version: 1\nprocess: {run_as_user: nobody}\n",
			[]at{{2, "nobody", "in range [1, 4294967294]"}}},
		{"lib.rs: validate_rejects_uid_out_of_range_high", "version: 1\nprocess: {run_as_group: 4294967295}\n",
			[]at{{2, "4294967295", "process.run_as_group"}}},
		{"lib.rs: valid_identity_accepts_boundary_uids", "version: 1\nprocess: {run_as_user: 1, run_as_group: 4294967294}\n", nil},
		{"lib.rs: validate_accepts_non_root_system_uid", "version: 1\nprocess: {run_as_user: 2, run_as_group: sandbox}\n", nil},
		{"lib.rs: validate_accepts_omitted_process_fields", "version: 1\nprocess: {run_as_user: \"\"}\n", nil},

		// Filesystem paths.
		{"lib.rs: validate_rejects_too_many_paths", "version: 1\nfilesystem_policy:\n  read_only: [" + manyPaths(200) + "]\n  read_write: [" + manyPaths(57) + "]\n",
			[]at{{4, "/p56", "too many paths (257 > 256)"}}},
		{"lib.rs: validate_rejects_too_many_paths (256 is the limit)", "version: 1\nfilesystem_policy:\n  read_only: [" + manyPaths(256) + "]\n", nil},
		{"lib.rs: validate_rejects_path_too_long", "version: 1\nfilesystem_policy:\n  read_only: [/" + strings.Repeat("a", 4096) + "]\n",
			[]at{{3, "/a", "path is 4097 bytes, over the limit of 4096"}}},
		{"lib.rs: validate_rejects_relative_paths", "version: 1\nfilesystem_policy:\n  read_only: [usr/lib]\n",
			[]at{{3, "usr", "relative path"}}},
		{"lib.rs: validate_rejects_path_traversal", "version: 1\nfilesystem_policy:\n  read_write: [/sandbox/../etc]\n",
			[]at{{3, "/sandbox", `contains ".."`}}},

		// Explicit TCP hosts.
		{"lib.rs: validate_rejects_ip_literal_hosts_for_explicit_tcp", epPolicy("host: 10.0.0.5", "port: 6379", "protocol: tcp"),
			[]at{{5, "10.0.0.5", "not an IP literal"}}},
		{"lib.rs: validate_rejects_ip_literal_hosts_for_explicit_tcp (IPv6)", epPolicy(`host: "::1"`, "port: 6379", "protocol: TCP"),
			[]at{{5, `"::1"`, "not an IP literal"}}},
		{"lib.rs: validate_rejects_malformed_dns_selectors_for_explicit_tcp", epPolicy("host: redis.example.com.", "port: 6379", "protocol: tcp"),
			[]at{{5, "redis", "omit the trailing DNS root dot"}}},
		{"lib.rs: validate_accepts_valid_policy (ip literal without tcp)", epPolicy("host: 10.0.0.5", "port: 6379"), nil},
		{"lib.rs: validate_accepts_valid_policy (trailing dot without tcp)", epPolicy("host: redis.example.com.", "port: 6379"), nil},

		// l7_validate.rs.
		{"l7_validate.rs: rejects_unknown_protocol", epPolicy("host: a.example.com", "port: 443", "protocol: ftp"),
			[]at{{7, "ftp", `unknown protocol "ftp"`}}},
		{"l7_validate.rs: rejects_rules_and_access_together", epPolicy("host: a.example.com", "port: 443", "protocol: rest", "access: full", "rules: [{allow: {method: GET}}]"),
			[]at{{8, "access", "rules and access are mutually exclusive"}}},
		{"l7_validate.rs: rejects_jsonrpc_with_access_presets", epPolicy("host: a.example.com", "port: 443", "protocol: json-rpc", "access: full"),
			[]at{{8, "access", "does not support access presets"}}},
		{"l7_validate.rs: rejects_mcp_with_access_presets", epPolicy("host: a.example.com", "port: 443", "protocol: mcp", "access: full"),
			[]at{{8, "access", "mcp.allow_all_known_mcp_methods"}}},
		{"l7_validate.rs: rejects_jsonrpc_without_rules", epPolicy("host: a.example.com", "port: 443", "protocol: json-rpc"),
			[]at{{7, "protocol", "requires explicit rules with allow.method"}}},
		{"l7_validate.rs: rejects_protocol_without_rules_or_access", epPolicy("host: a.example.com", "port: 443", "protocol: rest"),
			[]at{{7, "protocol", "requires rules or access"}}},
		{"l7_validate.rs: rejects_mcp_without_rules_when_allow_all_false", epPolicy("host: a.example.com", "port: 443", "protocol: mcp"),
			[]at{{7, "protocol", "mcp requires rules when"}}},
		{"l7_validate.rs: accepts_mcp_with_allow_all_true", epPolicy("host: a.example.com", "port: 443", "protocol: mcp", "mcp: {allow_all_known_mcp_methods: true}"), nil},
		{"l7_validate.rs: rejects_rules_that_deny_all", epPolicy("host: a.example.com", "port: 443", "protocol: rest", "rules: [{allow: {}}]"),
			[]at{{8, "rules", "rules would deny all traffic"}}},
		{"l7_validate.rs: mcp_allow_all_with_empty_allow_not_rejected", epPolicy("host: a.example.com", "port: 443", "protocol: mcp", "rules: [{allow: {}}]", "mcp: {allow_all_known_mcp_methods: true}"), nil},
		{"l7_validate.rs: rejects_deny_rules_without_protocol", epPolicy("host: a.example.com", "port: 443", "access: full", "deny_rules: [{method: POST}]"),
			[]at{{8, "deny_rules", "deny_rules require an L7 protocol"}}},
		{"l7_validate.rs: rejects_deny_rules_without_allow_base", epPolicy("host: a.example.com", "port: 443", "protocol: rest", "deny_rules: [{method: POST}]"),
			[]at{{7, "protocol", "requires rules or access"}, {8, "deny_rules", "deny_rules require rules or access"}}},
		{"l7_validate.rs: valid_endpoint_produces_no_errors", epPolicy("host: a.example.com", "port: 443", "protocol: REST", "access: read-only"), nil},
		{"l7_validate.rs: explicit_tcp_rejects_l7_fields", epPolicy("host: a.example.com", "port: 443", "protocol: tcp", "access: full"),
			[]at{{7, "protocol", "protocol tcp does not support access, rules, or deny_rules"}}},
		{"l7_validate.rs: explicit_tcp_rejects_additional_l7_fields", epPolicy("host: a.example.com", "port: 443", "protocol: tcp", "enforcement: enforce", "path: /x"),
			[]at{{7, "protocol", "protocol tcp does not support L7-only fields: enforcement, path"}}},

		// lib.rs per-endpoint L7 and credential checks.
		{"lib.rs: validate_sandbox_policy (path must start with /)", epPolicy("host: a.example.com", "port: 443", "protocol: rest", "access: full", "path: api"),
			[]at{{9, "api", "must start with '/' or be '**'"}}},
		{"lib.rs: validate_sandbox_policy (persisted_queries values)", epPolicy("host: a.example.com", "port: 443", "protocol: graphql", "access: full", "persisted_queries: maybe"),
			[]at{{9, "maybe", `persisted_queries: invalid value "maybe"`}}},
		{"lib.rs: validate_sandbox_policy (sql enforce)", epPolicy("host: db.example.com", "port: 5432", "protocol: sql", "access: full", "enforcement: enforce"),
			[]at{{9, "enforcement", "SQL enforcement requires full SQL parsing"}}},
		{"lib.rs: validate_sandbox_policy (mcp options only for mcp)", epPolicy("host: a.example.com", "port: 443", "protocol: rest", "access: full", "mcp: {strict_tool_names: false}"),
			[]at{{9, "mcp", "mcp options are only valid for protocol mcp"}}},
		{"lib.rs: validate_sandbox_policy (graphql operation_type)", epPolicy("host: a.example.com", "port: 443", "protocol: graphql", "rules: [{allow: {operation_type: read}}]"),
			[]at{{8, "{allow", "rules[0].allow.operation_type must be query, mutation, or subscription"}}},
		{"lib.rs: validate_rejects_credential_signing_without_signing_service", epPolicy("host: a.example.com", "port: 443", "credential_signing: sigv4"),
			[]at{{7, "credential_signing", "credential_signing needs signing_service"}}},
		{"lib.rs: validate_accepts_sigv4_no_body_with_signing_service", epPolicy("host: a.example.com", "port: 443", "credential_signing: sigv4:no_body", "signing_service: bedrock"), nil},
		{"lib.rs: validate_rejects_unknown_credential_signing", epPolicy("host: a.example.com", "port: 443", "credential_signing: hmac", "signing_service: bedrock"),
			[]at{{7, "hmac", `credential_signing: invalid value "hmac"`}}},
		{"lib.rs: validate_rejects_credential_signing_with_body_rewrite", epPolicy("host: a.example.com", "port: 443", "credential_signing: sigv4", "signing_service: s3", "request_body_credential_rewrite: true"),
			[]at{{9, "request_body", "cannot both be set"}}},
		{"lib.rs: round_trip_preserves_endpoint_credential_binding", epPolicy("host: a.example.com", "port: 443", "credential_binding: {provider: github}"), nil},

		// Schema of the nested fields (deny_unknown_fields).
		{"lib.rs: parse_rejects_unknown_fields_in_deny_rule", epPolicy("host: a.example.com", "port: 443", "protocol: rest", "access: full", "deny_rules: [{method: POST, pth: /x}]"),
			[]at{{9, "pth", `unknown key "pth" in deny_rules[0]`}, {9, "pth", `did you mean "path"?`}}},
		{"lib.rs: parse_rejects_unsupported_json_rpc_config_fields", epPolicy("host: a.example.com", "port: 443", "protocol: json-rpc", "rules: [{allow: {method: \"*\"}}]", "json_rpc: {max_body_bytes: 1024, strict_tool_names: true}"),
			[]at{{9, "strict_tool_names", `unknown key "strict_tool_names" in json_rpc`}}},
		{"lib.rs: parse_deny_rules_with_query_any", epPolicy("host: a.example.com", "port: 443", "protocol: rest", "access: full", "deny_rules: [{method: GET, query: {repo: {any: [\"a/*\", b]}}}]"), nil},
		{"lib.rs: parse_mcp_rules_to_runtime_fields", epPolicy("host: a.example.com", "port: 443", "protocol: mcp", "rules: [{allow: {method: tools/call, tool: search, params: {query: {text: \"*\"}}}}]", "mcp: {max_body_bytes: 2048, strict_tool_names: false}"), nil},
		{"lib.rs: L7RuleDef (allow is required)", epPolicy("host: a.example.com", "port: 443", "protocol: rest", "rules: [{method: GET}]"),
			[]at{{8, "method", `unknown key "method" in rules[0]`}, {8, "{method", "rules[0] has no allow"}, {8, "rules", "rules would deny all traffic"}}},
		{"lib.rs: NetworkCredentialBindingDef (provider is required)", epPolicy("host: a.example.com", "port: 443", "credential_binding: {name: x}"),
			[]at{{7, "name", `unknown key "name" in credential_binding`}, {7, "{name", "credential_binding has no provider"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkPolicy(t, tc.src, tc.want) })
	}
}

// TestValidateAmbiguity: ambiguity.rs find_endpoint_ambiguities. Errors
// are at the later endpoint of the pair. Parse runs the check when
// nothing else is wrong; these rows run it again after a successful parse.
func TestValidateAmbiguity(t *testing.T) {
	two := func(left, right string) string {
		return "version: 1\nnetwork_policies:\n  left:\n    endpoints: [" + left + "]\n    binaries: [{path: /usr/bin/curl}]\n  right:\n    endpoints: [" + right + "]\n    binaries: [{path: /usr/bin/bash}]\n"
	}
	cases := []struct {
		name string
		src  string
		want []at
	}{
		{"ambiguity.rs: exact_wildcard_tls_conflict_is_rejected", two("{host: \"*.example.com\", port: 443, tls: skip}", "{host: api.example.com, port: 443}"),
			[]at{{7, "{", `tls="skip" vs "auto"`}}},
		{"ambiguity.rs: disjoint_ports_do_not_overlap", two("{host: api.example.com, port: 443, tls: skip}", "{host: api.example.com, port: 8443}"), nil},
		{"ambiguity.rs: intersecting_wildcards_are_detected (disjoint)", two("{host: \"*.example.com\", port: 443, tls: skip}", "{host: \"*.example.org\", port: 443}"), nil},
		{"ambiguity.rs: allowed_ip_conflict_is_rejected_regardless_of_order", two("{host: api.example.com, port: 443, allowed_ips: [10.0.1.0/24, 10.0.0.0/24]}", "{host: api.example.com, port: 443, allowed_ips: [10.0.0.0/24, 10.0.1.0/24]}"), nil},
		{"ambiguity.rs: allowed_ip_conflict_is_rejected_regardless_of_order (conflict)", two("{host: api.example.com, port: 443, allowed_ips: [10.0.1.0/24]}", "{host: api.example.com, ports: [80, 443], allowed_ips: [10.0.2.0/24]}"),
			[]at{{7, "{", "allowed_ips="}, {7, "{", "on port(s) 443"}}},
		{"ambiguity.rs: explicit_tcp_and_omitted_protocol_are_ambiguous_for_native_tcp_eligibility", two("{host: api.example.com, port: 443, protocol: tcp, tls: skip}", "{host: api.example.com, port: 443, tls: skip}"),
			[]at{{7, "{", "protocol tcp="}}},
		{"ambiguity.rs: compatible_request_rules_may_overlap", two("{host: api.example.com, port: 443, protocol: rest, tls: skip, access: read-only}", "{host: api.example.com, port: 443, protocol: rest, tls: skip, access: read-write}"), nil},
		{"ambiguity.rs: plain_l4_endpoint_does_not_compete_with_l7_endpoint_metadata", two("{host: api.example.com, port: 443}", "{host: api.example.com, port: 443, protocol: rest, access: full, enforcement: enforce}"), nil},
		{"ambiguity.rs: disjoint_path_specific_protocols_may_overlap", two("{host: api.example.com, port: 443, path: /graphql, protocol: graphql, rules: [{allow: {operation_type: query}}]}", "{host: api.example.com, port: 443, path: \"/repos/**\", protocol: rest, access: full}"), nil},
		{"ambiguity.rs: question_mark_path_overlap_is_detected", two("{host: api.example.com, port: 443, path: \"/v?\", protocol: rest, access: full}", "{host: api.example.com, port: 443, path: /v1, protocol: graphql, rules: [{allow: {operation_type: query}}]}"),
			[]at{{7, "{", `protocol="rest" vs "graphql"`}}},
		{"ambiguity.rs: disjoint_character_class_paths_may_overlap_by_host_and_port", two("{host: api.example.com, port: 443, path: \"/v[12]\", protocol: rest, access: full}", "{host: api.example.com, port: 443, path: \"/v[34]\", protocol: graphql, rules: [{allow: {operation_type: query}}]}"), nil},
		{"ambiguity.rs: overlapping_character_class_paths_are_detected", two("{host: api.example.com, port: 443, path: \"/v[12]\", protocol: rest, access: full}", "{host: api.example.com, port: 443, path: \"/v[23]\", protocol: graphql, rules: [{allow: {operation_type: query}}]}"),
			[]at{{7, "{", "protocol="}}},
		{"ambiguity.rs: more_specific_path_may_override_request_pipeline_metadata", two("{host: api.example.com, port: 443, protocol: rest, access: full, enforcement: enforce}", "{host: api.example.com, port: 443, path: /graphql, protocol: graphql, rules: [{allow: {operation_type: query}}], enforcement: enforce}"), nil},
		{"ambiguity.rs: credential_and_parser_conflicts_are_rejected_on_same_path", two("{host: api.example.com, port: 443, protocol: rest, access: full, credential_signing: sigv4, signing_service: execute-api}", "{host: api.example.com, port: 443, protocol: rest, access: full, credential_signing: sigv4, signing_service: bedrock, allow_encoded_slash: true}"),
			[]at{{7, "{", "allow_encoded_slash="}, {7, "{", "signing_service="}}},
		{"ambiguity.rs: credential_binding_conflicts_are_rejected_on_same_endpoint", two("{host: api.example.com, port: 443, credential_binding: {provider: a}}", "{host: api.example.com, port: 443, credential_binding: {provider: b}}"),
			[]at{{7, "{", "credential_binding.provider="}}},
		{"ambiguity.rs: json_rpc_body_limit_is_compared_only_within_the_same_protocol", two("{host: api.example.com, port: 443, protocol: mcp, mcp: {allow_all_known_mcp_methods: true, max_body_bytes: 2048}}", "{host: api.example.com, port: 443, protocol: mcp, mcp: {allow_all_known_mcp_methods: true, max_body_bytes: 4096}}"),
			[]at{{7, "{", "max_body_bytes="}}},
		{"ambiguity.rs: different_binary_lists_do_not_hide_endpoint_ambiguity (same policy)",
			"version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: api.example.com, port: 443, tls: skip}\n      - {host: API.example.com, port: 443}\n    binaries: [{path: /usr/bin/curl}]\n",
			[]at{{6, "{", "tls="}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkPolicyWith(t, tc.src, tc.want, parseWithAmbiguity) })
	}
}

// parseWithAmbiguity is Parse followed by the ambiguity check.
func parseWithAmbiguity(file string, data []byte) error {
	if _, err := Parse(file, data); err != nil {
		return err
	}
	p := &parser{file: file}
	p.parse(data)
	p.checkAmbiguity(p.endpoints)
	if len(p.errs) > 0 {
		return p.errs
	}
	return nil
}

func TestGlobsOverlap(t *testing.T) {
	// ambiguity.rs: exact_and_wildcard_hosts_overlap, intersecting_wildcards_are_detected,
	// negated_character_class_paths_follow_runtime_glob_semantics.
	for _, c := range []struct {
		l, r string
		path bool
		want bool
	}{
		{"api.example.com", "*.example.com", false, true},
		{"us-aiplatform.googleapis.com", "*-aiplatform.googleapis.com", false, true},
		{"api.example.com", "*.other.com", false, false},
		{"*.example.com", "api.*.com", false, true},
		{"**.example.com", "api.example.com", false, true},
		{"*.example.com", "a.b.example.com", false, false},
		{"**.example.com", "a.b.example.com", false, true},
		{"*.example.com", "*.example.org", false, false},
		{"/v[!0]", "/v1", true, true},
		{"/v[!0]", "/v0", true, false},
		{"/a/*", "/a/b/c", true, true},
	} {
		got := false
		if c.path {
			got = pathPatternsOverlap(c.l, c.r)
		} else {
			got = hostPatternsOverlap(c.l, c.r)
		}
		if got != c.want {
			t.Errorf("overlap(%q, %q) = %v, want %v", c.l, c.r, got, c.want)
		}
	}
}

func manyPaths(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("/p%d", i)
	}
	return strings.Join(s, ", ")
}

// checkPolicy parses src and wants exactly the errors in want (nil: the
// policy loads).
func checkPolicy(t *testing.T, src string, want []at) {
	t.Helper()
	checkPolicyWith(t, src, want, func(file string, data []byte) error {
		_, err := Parse(file, data)
		return err
	})
}

func checkPolicyWith(t *testing.T, src string, want []at, parse func(string, []byte) error) {
	t.Helper()
	err := parse("v.yaml", []byte(src))
	if want == nil {
		if err != nil {
			t.Fatalf("want the policy to load, got:\n%v", err)
		}
		return
	}
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("want an ErrorList, got %v", err)
	}
	for _, w := range want {
		line, col := w.pos(t, src)
		found := false
		for _, e := range list {
			if e.File == "v.yaml" && e.Line == line && e.Col == col && strings.Contains(e.Msg, w.msg) {
				found = true
			}
		}
		if !found {
			t.Errorf("missing error at %d:%d containing %q; got:\n%v", line, col, w.msg, list)
		}
	}
	if len(list) > len(want) {
		t.Errorf("got %d errors, want at most %d:\n%v", len(list), len(want), list)
	}
}
