package policy

import (
	"fmt"
	"strings"
)

// The OpenShell compatibility table: data derived from the tests named in
// each row's source (NVIDIA/OpenShell at 2f7fb65). Run by TestOpenShellCompat.

const (
	srcOPA  = "crates/openshell-supervisor-network/src/opa.rs:"
	srcLib  = "crates/openshell-policy/src/lib.rs:"
	srcL7   = "crates/openshell-policy/src/l7_validate.rs:"
	srcAmb  = "crates/openshell-policy/src/ambiguity.rs:"
	srcDst  = "crates/openshell-supervisor-network/src/proxy/destination.rs:"
	srcHP   = "crates/openshell-core/src/host_pattern.rs:"
	srcE2E  = "e2e/python/test_sandbox_policy.py:"
	osTestd = "crates_openshell-supervisor-network_testdata_sandbox-policy.yaml"
)

// Reasons shared by several differs rows.
const (
	diffL7        = "L7 is not enforced: stockade decides at L4, so the whole host:port is reachable for an allowed binary where OpenShell denies the request at L7"
	diffDNS       = "DNS eligibility: every host named in a policy resolves in stockade (issue 13 keeps this); OpenShell's policy DNS admits only protocol: tcp endpoints"
	diffLoopback  = "stockade rejects allowed_ips overlapping loopback at load; OpenShell accepts the policy and blocks loopback per connection"
	diffSSRFLayer = "package policy answers the policy question only: the decision allows, and loopback/link-local/internal addresses are blocked by the boundary's destination check after resolution (as OpenShell's SSRF check does), outside this table"
)

// net is a network query for exe (""=curl) with the expected outcome and,
// when OpenShell asserts it, the matched policy key.
func nq(host string, port uint16, exe string, allow bool, policy string) compatQuery {
	return compatQuery{host: host, port: port, exe: exe, allow: allow, policy: policy}
}

func ancq(q compatQuery, ancestors ...string) compatQuery {
	q.ancestors = ancestors
	return q
}

func dnsq(name string, allow bool) compatQuery {
	return compatQuery{host: name, dns: true, allow: allow}
}

func destq(q compatQuery, exact *bool, ips ...string) compatQuery {
	q.exact = exact
	if ips == nil {
		ips = []string{}
	}
	q.ips = ips
	return q
}

func compatTable() []compatRow {
	var rows []compatRow
	for _, part := range [][]compatRow{
		opaRows(), libRows(), l7ValidateRows(), ambiguityRows(), destinationRows(), hostPatternRows(), e2eRows(),
	} {
		rows = append(rows, part...)
	}
	return rows
}

// --- crates/openshell-supervisor-network/src/opa.rs ---------------------

const l7TestData = `version: 1
network_policies:
  rest_api:
    name: rest_api
    endpoints:
      - host: api.example.com
        port: 8080
        protocol: rest
        enforcement: enforce
        rules:
          - allow: { method: GET, path: "/repos/**" }
          - allow: { method: POST, path: "/repos/*/issues" }
    binaries:
      - { path: /usr/bin/curl }
  readonly_api:
    name: readonly_api
    endpoints:
      - { host: api.readonly.com, port: 8080, protocol: rest, enforcement: enforce, access: read-only }
    binaries:
      - { path: /usr/bin/curl }
  full_api:
    name: full_api
    endpoints:
      - { host: api.full.com, port: 8080, protocol: rest, enforcement: audit, access: full }
    binaries:
      - { path: /usr/bin/curl }
  query_api:
    name: query_api
    endpoints:
      - host: api.query.com
        port: 8080
        protocol: rest
        enforcement: enforce
        rules:
          - allow: { method: GET, path: "/download", query: { tag: "foo-*" } }
          - allow: { method: GET, path: "/search", query: { tag: { any: ["foo-*", "bar-*"] } } }
    binaries:
      - { path: /usr/bin/curl }
  graphql_api:
    name: graphql_api
    endpoints:
      - host: api.graphql.com
        port: 443
        protocol: graphql
        enforcement: enforce
        persisted_queries: allow_registered
        graphql_persisted_queries:
          abc123: { operation_type: query, operation_name: Viewer, fields: [viewer] }
        rules:
          - allow: { operation_type: query, fields: [viewer, repository] }
          - allow: { operation_type: mutation, operation_name: "Issue*", fields: [createIssue, deleteRepository] }
        deny_rules:
          - { operation_type: mutation, fields: [deleteRepository] }
    binaries:
      - { path: /usr/bin/curl }
  graphql_readonly:
    name: graphql_readonly
    endpoints:
      - { host: gql.readonly.com, port: 443, protocol: graphql, enforcement: enforce, access: read-only }
    binaries:
      - { path: /usr/bin/curl }
  graphql_ws:
    name: graphql_ws
    endpoints:
      - host: realtime.graphql.com
        ports: [443]
        path: "/graphql"
        protocol: websocket
        enforcement: enforce
        rules:
          - allow: { method: GET, path: "/graphql" }
          - allow: { operation_type: query, fields: [viewer] }
          - allow: { operation_type: subscription, fields: [messageAdded] }
        deny_rules:
          - { operation_type: mutation }
    binaries:
      - { path: /usr/bin/curl }
  l4_only:
    name: l4_only
    endpoints:
      - { host: l4only.example.com, port: 443 }
      - { host: explicit-tcp.example.com, port: 443, protocol: tcp }
    binaries:
      - { path: /usr/bin/curl }
`

const allowedIPsTestData = `version: 1
network_policies:
  internal_api:
    name: internal_api
    endpoints:
      - { host: my-service.corp.net, port: 8080, allowed_ips: ["10.0.5.0/24"] }
    binaries:
      - { path: /usr/bin/curl }
  private_network:
    name: private_network
    endpoints:
      - { port: 9443, allowed_ips: ["172.16.0.0/12", "192.168.1.1"] }
    binaries:
      - { path: /usr/bin/curl }
  public_api:
    name: public_api
    endpoints:
      - { host: api.github.com, port: 443 }
    binaries:
      - { path: /usr/bin/curl }
  wildcard_api:
    name: wildcard_api
    endpoints:
      - { host: "*.corp.net", port: 443 }
    binaries:
      - { path: /usr/bin/curl }
`

// allowedIPsNoHostless is allowedIPsTestData without the host-less endpoint,
// for the rows that do not query it (they then hold before host-less
// endpoints load).
var allowedIPsNoHostless = strings.Replace(allowedIPsTestData, `  private_network:
    name: private_network
    endpoints:
      - { port: 9443, allowed_ips: ["172.16.0.0/12", "192.168.1.1"] }
    binaries:
      - { path: /usr/bin/curl }
`, "", 1)

func opaRows() []compatRow {
	node, claude, git, py := "/usr/bin/node", "/usr/local/bin/claude", "/usr/bin/git", "/usr/bin/python3"
	glob := func(bin string) string {
		return compatDoc("", compatNP("glob_test", compatEPs("{ host: example.com, port: 443 }"), bin))
	}
	script := compatDoc("", compatNP("script_test", compatEPs("{ host: example.com, port: 443 }"), "/usr/local/bin/my-tool"))
	wild := func(host string, ports string) string {
		return compatDoc("", compatNP("wildcard", compatEPs(fmt.Sprintf("{ host: %q, %s }", host, ports)), "/usr/bin/curl"))
	}
	wildTest := compatDoc("", compatNP("wildcard_test", compatEPs(`{ host: "*.example.com", port: 443 }`), "/usr/bin/test"))
	multi := compatDoc("", compatNP("multi", compatEPs("{ host: api.example.com, ports: [443, 8443] }"), "/usr/bin/curl"))
	inference := compatDoc(restrictiveFS+compatProcess("sandbox", "sandbox"),
		compatNP("claude_code", compatEPs("{ host: api.anthropic.com, port: 443 }"), claude),
		compatNP("gitlab", compatEPs("{ host: gitlab.com, port: 443 }"), "/usr/bin/glab"))
	noInference := compatDoc(restrictiveFS+compatProcess("sandbox", "sandbox"),
		compatNP("gitlab", compatEPs("{ host: gitlab.com, port: 443 }"), "/usr/bin/glab"))
	overlapping := compatDoc("",
		compatNP("test_server", compatEPs("host: 192.168.1.100\nport: 8567\nprotocol: rest\nenforcement: enforce\nrules:\n  - allow: { method: GET, path: \"**\" }"), "/usr/bin/curl"),
		compatNP("allow_192_168_1_100_8567", compatEPs("host: 192.168.1.100\nport: 8567\nprotocol: rest\nenforcement: enforce\ntls: skip\nallowed_ips: [192.168.1.100]\nrules:\n  - allow: { method: GET, path: \"**\" }"), "/usr/bin/curl"))
	dnsSnapshot := compatDoc(restrictiveFS, compatNP("dns_transport", compatEPs(
		"{ host: resolver.example, ports: [53, 853], protocol: tcp }",
		"{ host: web.example, port: 443, protocol: rest, access: full }",
		"{ host: implicit.example, port: 443 }",
		`{ host: "", port: 53, protocol: tcp, allowed_ips: [8.8.8.8] }`,
		"{ host: secondary.example, port: 5353, protocol: tcp }"), "/usr/bin/one-process"))
	dnsSnapshotValid := strings.Replace(dnsSnapshot, "      - { host: \"\", port: 53, protocol: tcp, allowed_ips: [8.8.8.8] }\n", "", 1)
	s3 := compatDoc("", compatNP("s3", compatEPs(`{ host: "*.s3.*.amazonaws.com", port: 443 }`), "/usr/bin/curl"))
	intra := compatDoc("", compatNP("intra_label", compatEPs(`{ host: "*-aiplatform.googleapis.com", port: 443 }`), "/usr/bin/curl"))
	wildL7 := compatDoc(restrictiveFS, compatNP("wildcard_l7", compatEPs("host: \"*.example.com\"\nport: 8080\nprotocol: rest\nenforcement: enforce\ntls: terminate\nrules:\n  - allow: { method: GET, path: \"/api/**\" }"), "/usr/bin/curl"))
	multiL7 := compatDoc(restrictiveFS, compatNP("multi_l7", compatEPs("host: api.example.com\nports: [8080, 9090]\nprotocol: rest\nenforcement: enforce\ntls: terminate\nrules:\n  - allow: { method: GET, path: \"**\" }"), "/usr/bin/curl"))
	advisorBinary := compatDoc(restrictiveFS+compatProcess("sandbox", "sandbox"),
		"  allow_mcp_internal_corp_example_com_8443:\n    name: allow_mcp_internal_corp_example_com_8443\n    endpoints:\n      - { host: mcp-internal.corp.example.com, port: 8443 }\n    binaries:\n      - { path: /usr/bin/curl, harness: true }\n")
	nativeTCP := compatDoc("", compatNP("native_tcp", compatEPs("{ host: database.example.com, port: 5432, protocol: tcp }"), "/usr/bin/client"))
	tcpCredBinding := compatDoc("", compatNP("native_tcp", compatEPs("host: database.example.com\nport: 5432\nprotocol: tcp\ncredential_binding:\n  provider: database"), "/usr/bin/client"))
	ambiguousTLS := compatDoc("",
		compatNP("wildcard", compatEPs(`{ host: "*.example.com", port: 443, tls: skip }`), "/usr/bin/curl"),
		compatNP("exact", compatEPs("{ host: api.example.com, port: 443 }"), "/usr/bin/bash"))

	return []compatRow{
		// Decisions on OpenShell's testdata/sandbox-policy.yaml (test_engine).
		{source: srcOPA + "allowed_binary_and_endpoint", file: osTestd,
			queries: []compatQuery{nq("api.anthropic.com", 443, node, true, "claude_code")}},
		{source: srcOPA + "wrong_binary_denied", file: osTestd,
			queries: []compatQuery{nq("api.anthropic.com", 443, py, false, "")}},
		{source: srcOPA + "wrong_endpoint_denied", file: osTestd,
			queries: []compatQuery{nq("evil.example.com", 443, node, false, "")}},
		{source: srcOPA + "unknown_binary_default_deny", file: osTestd,
			queries: []compatQuery{nq("api.anthropic.com", 443, "/tmp/malicious", false, "")}},
		{source: srcOPA + "github_policy_allows_git", file: osTestd, needs: "policykey",
			queries: []compatQuery{nq("github.com", 443, git, true, "github_ssh_over_https")}},
		{source: srcOPA + "case_insensitive_host_matching", file: osTestd,
			queries: []compatQuery{nq("API.ANTHROPIC.COM", 443, node, true, "claude_code")}},
		{source: srcOPA + "wrong_port_denied", file: osTestd,
			queries: []compatQuery{nq("api.anthropic.com", 80, node, false, "")}},
		{source: srcOPA + "from_strings_and_from_files_produce_same_results", file: osTestd,
			queries: []compatQuery{nq("api.anthropic.com", 443, node, true, "")}},
		{source: srcOPA + "reload_replaces_policy",
			yaml:    compatDoc(restrictiveFS + compatProcess("sandbox", "sandbox") + "network_policies: {}\n"),
			queries: []compatQuery{nq("api.anthropic.com", 443, node, false, "")}},
		{source: srcOPA + "ancestor_binary_allowed", file: osTestd, needs: "policykey",
			queries: []compatQuery{ancq(nq("github.com", 443, py, true, "github_ssh_over_https"), git)}},
		{source: srcOPA + "no_ancestor_match_denied", file: osTestd,
			queries: []compatQuery{ancq(nq("github.com", 443, py, false, ""), "/usr/bin/bash")}},
		{source: srcOPA + "deep_ancestor_chain_matches", file: osTestd,
			queries: []compatQuery{ancq(nq("github.com", 443, py, true, ""), "/usr/bin/sh", git)}},
		{source: srcOPA + "empty_ancestors_falls_back_to_direct", file: osTestd,
			queries: []compatQuery{nq("api.anthropic.com", 443, claude, true, "claude_code")}},
		{source: srcOPA + "deny_reason_collapses_endpoint_misses", file: osTestd,
			queries: []compatQuery{nq("not-configured.example.com", 443, claude, false, "")}},
		{source: srcOPA + "network_action_with_dev_policy", file: osTestd, needs: "policykey",
			queries: []compatQuery{
				nq("api.anthropic.com", 443, claude, true, "claude_code"),
				nq("github.com", 443, git, true, "github_ssh_over_https"),
			}},
		{source: srcOPA + "policy_dns_snapshot_accepts_the_default_multi_policy_shape", file: osTestd, differs: diffDNS,
			queries: []compatQuery{dnsq("api.anthropic.com", true), dnsq("github.com", true), dnsq("gitlab.com", true)}},
		// Policy DNS eligibility.
		{source: srcOPA + "policy_dns_snapshot_is_tcp_only_stable_and_generation_consistent", yaml: dnsSnapshot, reject: "host",
			differs: "OpenShell's OPA test loads this data unvalidated; its own validate_sandbox_policy rejects the host-less protocol: tcp endpoint (\"protocol tcp requires a DNS hostname\"), and stockade's load validates"},
		{source: srcOPA + "policy_dns_snapshot_is_tcp_only_stable_and_generation_consistent", yaml: dnsSnapshotValid, differs: diffDNS,
			queries: []compatQuery{
				dnsq("resolver.example", true), dnsq("secondary.example", true),
				dnsq("web.example", true), dnsq("implicit.example", true), // OpenShell: not eligible (not protocol: tcp)
				dnsq("unlisted.example", false),
			}},
		// Wildcard host, malformed names.
		{source: srcOPA + "wildcard_host_nul_byte_causes_opa_error", yaml: wildTest, needs: "hostpattern",
			queries: []compatQuery{nq("sub\x00.example.com", 443, "/usr/bin/test", false, "")}},
		{source: srcOPA + "wildcard_host_nul_byte_extra_label_causes_opa_error", yaml: wildTest,
			queries: []compatQuery{nq("evil.com\x00.example.com", 443, "/usr/bin/test", false, "")}},
		{source: srcOPA + "wildcard_host_percent_encoded_dot_no_match", yaml: wildTest,
			queries: []compatQuery{nq("evil%2eexample.com", 443, "/usr/bin/test", false, "")}},
		// Binary globs and ancestors.
		{source: srcOPA + "glob_pattern_matches_binary", yaml: glob("/usr/bin/*"),
			queries: []compatQuery{nq("example.com", 443, node, true, "glob_test")}},
		{source: srcOPA + "glob_pattern_matches_ancestor", yaml: glob("/usr/local/bin/*"),
			queries: []compatQuery{ancq(nq("example.com", 443, node, true, "glob_test"), claude)}},
		{source: srcOPA + "glob_pattern_no_cross_segment", yaml: glob("/usr/bin/*"),
			queries: []compatQuery{nq("example.com", 443, "/usr/bin/subdir/node", false, "")}},
		{source: srcOPA + "cmdline_path_does_not_grant_access", yaml: script,
			queries: []compatQuery{ancq(nq("example.com", 443, node, false, ""), "/usr/bin/bash")}},
		{source: srcOPA + "cmdline_path_no_match_denied", yaml: script,
			queries: []compatQuery{ancq(nq("example.com", 443, node, false, ""), "/usr/bin/bash")}},
		{source: srcOPA + "cmdline_glob_pattern_does_not_grant_access", yaml: glob("/usr/local/bin/*"),
			queries: []compatQuery{nq("example.com", 443, node, false, "")}},
		// L7 test data: loads; L4 decisions agree, L7 denials differ.
		{source: srcOPA + "l7_get_allowed_by_rules", yaml: l7TestData,
			queries: []compatQuery{nq("api.example.com", 8080, "", true, "rest_api")}},
		{source: srcOPA + "l7_get_allowed_by_rules_when_binary_identity_relaxed", yaml: l7TestData,
			queries: []compatQuery{{host: "api.example.com", port: 8080, noIdent: true, allow: true, policy: "rest_api"}}},
		{source: srcOPA + "l7_delete_denied_by_rules", yaml: l7TestData, differs: diffL7,
			queries: []compatQuery{nq("api.example.com", 8080, "", true, "rest_api")}},
		{source: srcOPA + "l7_readonly_preset_denies_post", yaml: l7TestData, differs: diffL7,
			queries: []compatQuery{nq("api.readonly.com", 8080, "", true, "readonly_api")}},
		{source: srcOPA + "l7_full_preset_allows_everything", yaml: l7TestData,
			queries: []compatQuery{nq("api.full.com", 8080, "", true, "full_api")}},
		{source: srcOPA + "l7_query_missing_required_key_denied", yaml: l7TestData, differs: diffL7,
			queries: []compatQuery{nq("api.query.com", 8080, "", true, "query_api")}},
		{source: srcOPA + "l7_graphql_deny_rule_takes_precedence", yaml: l7TestData, differs: diffL7,
			queries: []compatQuery{nq("api.graphql.com", 443, "", true, "graphql_api")}},
		{source: srcOPA + "l7_graphql_readonly_access_allows_query_and_denies_mutation", yaml: l7TestData, differs: diffL7,
			queries: []compatQuery{nq("gql.readonly.com", 443, "", true, "graphql_readonly")}},
		{source: srcOPA + "l7_websocket_graphql_deny_rule_takes_precedence", yaml: l7TestData, differs: diffL7,
			queries: []compatQuery{nq("realtime.graphql.com", 443, "", true, "graphql_ws")}},
		{source: srcOPA + "l7_no_request_on_l4_only_endpoint", yaml: l7TestData,
			queries: []compatQuery{nq("l4only.example.com", 443, "", true, "l4_only")}},
		{source: srcOPA + "explicit_tcp_authorizes_as_l4_without_endpoint_config", yaml: l7TestData,
			queries: []compatQuery{nq("explicit-tcp.example.com", 443, "", true, "l4_only")}},
		{source: srcOPA + "l7_wrong_binary_denied_even_with_matching_rules", yaml: l7TestData,
			queries: []compatQuery{nq("api.example.com", 8080, "/usr/bin/wget", false, "")}},
		{source: srcOPA + "l7_overlapping_policies_allow_request_does_not_crash", yaml: overlapping, needs: "validation", reject: "tls",
			differs: "OpenShell's OPA test loads this data unvalidated; its policy loader (ambiguity.rs, proto_load_rejects_ambiguous_endpoint_metadata_with_rationale) rejects overlapping endpoints whose tls and allowed_ips disagree, and stockade's load validates"},
		{source: srcOPA + "proto_load_rejects_ambiguous_endpoint_metadata_with_rationale", yaml: ambiguousTLS, needs: "validation", reject: "tls"},
		// network_action tests.
		{source: srcOPA + "explicitly_allowed_endpoint_binary_returns_allow", yaml: inference,
			queries: []compatQuery{nq("api.anthropic.com", 443, claude, true, "claude_code")}},
		{source: srcOPA + "relaxed_binary_identity_allows_declared_endpoint_without_binary_match", yaml: inference,
			queries: []compatQuery{
				{host: "api.anthropic.com", port: 443, noIdent: true, allow: true, policy: "claude_code", exact: exactYes},
				{host: "api.openai.com", port: 443, noIdent: true, allow: false},
			}},
		{source: srcOPA + "unknown_endpoint_returns_deny", yaml: inference,
			queries: []compatQuery{nq("api.openai.com", 443, py, false, "")}},
		{source: srcOPA + "unknown_endpoint_without_inference_returns_deny", yaml: noInference,
			queries: []compatQuery{nq("api.openai.com", 443, py, false, "")}},
		{source: srcOPA + "endpoint_in_policy_binary_not_allowed_returns_deny", yaml: inference,
			queries: []compatQuery{nq("api.anthropic.com", 443, py, false, "")}},
		{source: srcOPA + "endpoint_in_policy_binary_not_allowed_without_inference_returns_deny", yaml: noInference,
			queries: []compatQuery{nq("gitlab.com", 443, py, false, "")}},
		// allowed_ips.
		{source: srcOPA + "allowed_ips_mode2_host_plus_ips_allows", yaml: allowedIPsNoHostless,
			queries: []compatQuery{nq("my-service.corp.net", 8080, "", true, "internal_api")}},
		{source: srcOPA + "egress_authorization_returns_one_generation_consistent_snapshot", yaml: allowedIPsNoHostless,
			queries: []compatQuery{destq(nq("my-service.corp.net", 8080, "", true, "internal_api"), exactYes, "10.0.5.0/24")}},
		{source: srcOPA + "egress_authorization_preserves_explicit_tcp_endpoint_identity", yaml: nativeTCP,
			queries: []compatQuery{nq("database.example.com", 5432, "/usr/bin/client", true, "native_tcp")}},
		{source: srcOPA + "proto_activation_rejects_explicit_tcp_credential_binding", yaml: tcpCredBinding, needs: "validation", reject: "credential_binding"},
		{source: srcOPA + "allowed_ips_mode2_returns_allowed_ips", yaml: allowedIPsNoHostless,
			queries: []compatQuery{destq(nq("my-service.corp.net", 8080, "", true, ""), nil, "10.0.5.0/24")}},
		{source: srcOPA + "allowed_ips_mode3_hostless_allows_any_domain", yaml: allowedIPsTestData, needs: "allowedips",
			queries: []compatQuery{nq("anything.example.com", 9443, "", true, "private_network")}},
		{source: srcOPA + "allowed_ips_mode3_returns_allowed_ips", yaml: allowedIPsTestData, needs: "allowedips",
			queries: []compatQuery{destq(nq("anything.example.com", 9443, "", true, ""), nil, "172.16.0.0/12", "192.168.1.1/32")}},
		{source: srcOPA + "allowed_ips_mode1_no_ips_returns_empty", yaml: allowedIPsNoHostless,
			queries: []compatQuery{destq(nq("api.github.com", 443, "", true, "public_api"), nil)}},
		{source: srcOPA + "exact_declared_endpoint_host_true_for_l4_host_only", yaml: allowedIPsNoHostless,
			queries: []compatQuery{destq(nq("api.github.com", 443, "", true, ""), exactYes)}},
		{source: srcOPA + "exact_declared_endpoint_host_true_for_host_with_allowed_ips", yaml: allowedIPsNoHostless,
			queries: []compatQuery{destq(nq("my-service.corp.net", 8080, "", true, ""), exactYes, "10.0.5.0/24")}},
		{source: srcOPA + "exact_declared_endpoint_host_false_for_hostless_allowed_ips", yaml: allowedIPsTestData, needs: "allowedips",
			queries: []compatQuery{destq(nq("anything.example.com", 9443, "", true, ""), exactNo, "172.16.0.0/12", "192.168.1.1/32")}},
		{source: srcOPA + "exact_declared_endpoint_host_false_for_wildcard_host", yaml: allowedIPsNoHostless,
			queries: []compatQuery{destq(nq("api.corp.net", 443, "", true, "wildcard_api"), exactNo)}},
		{source: srcOPA + "exact_declared_endpoint_host_false_for_advisor_proposed_binary", yaml: advisorBinary,
			differs: "binary harness: true is deprecated and ignored (a notice): stockade treats the endpoint as an exact declared host, OpenShell does not trust advisor-proposed binaries for exact-host SSRF handling",
			queries: []compatQuery{destq(nq("mcp-internal.corp.example.com", 8443, "", true, "allow_mcp_internal_corp_example_com_8443"), exactYes)}},
		{source: srcOPA + "allowed_ips_mode3_wrong_port_denied", yaml: allowedIPsTestData, needs: "allowedips",
			queries: []compatQuery{nq("anything.example.com", 12345, "", false, "")}},
		{source: srcOPA + "allowed_ips_proto_round_trip",
			yaml:    compatDoc(restrictiveFS, compatNP("internal", compatEPs(`{ host: internal.corp.net, port: 8080, allowed_ips: ["10.0.5.0/24", "10.0.6.0/24"] }`), "/usr/bin/curl")),
			queries: []compatQuery{destq(nq("internal.corp.net", 8080, "", true, "internal"), exactYes, "10.0.5.0/24", "10.0.6.0/24")}},
		// Multi-port.
		{source: srcOPA + "multi_port_endpoint_matches_first_port", yaml: multi,
			queries: []compatQuery{nq("api.example.com", 443, "", true, "multi")}},
		{source: srcOPA + "multi_port_endpoint_matches_second_port", yaml: multi,
			queries: []compatQuery{nq("api.example.com", 8443, "", true, "multi")}},
		{source: srcOPA + "multi_port_endpoint_rejects_unlisted_port", yaml: multi,
			queries: []compatQuery{nq("api.example.com", 80, "", false, "")}},
		{source: srcOPA + "single_port_backwards_compat", yaml: compatDoc("", compatNP("compat", compatEPs("{ host: api.example.com, port: 443 }"), "/usr/bin/curl")),
			queries: []compatQuery{nq("api.example.com", 443, "", true, "compat"), nq("api.example.com", 80, "", false, "")}},
		{source: srcOPA + "hostless_endpoint_multi_port", needs: "allowedips",
			yaml: compatDoc("", compatNP("private", compatEPs(`{ ports: [80, 443], allowed_ips: ["10.0.0.0/8"] }`), "/usr/bin/curl")),
			queries: []compatQuery{
				nq("anything.internal", 80, "", true, "private"),
				nq("anything.internal", 443, "", true, "private"),
				nq("anything.internal", 8080, "", false, ""),
			}},
		{source: srcOPA + "from_proto_multi_port_allows_matching", yaml: compatDoc(restrictiveFS, compatNP("multi", compatEPs("{ host: api.example.com, ports: [443, 8443] }"), "/usr/bin/curl")),
			queries: []compatQuery{nq("api.example.com", 443, "", true, ""), nq("api.example.com", 8443, "", true, ""), nq("api.example.com", 80, "", false, "")}},
		// Host wildcards.
		{source: srcOPA + "wildcard_host_matches_subdomain", yaml: wild("*.example.com", "port: 443"),
			queries: []compatQuery{nq("api.example.com", 443, "", true, "wildcard")}},
		{source: srcOPA + "wildcard_host_rejects_deep_subdomain", yaml: wild("*.example.com", "port: 443"),
			queries: []compatQuery{nq("deep.sub.example.com", 443, "", false, "")}},
		{source: srcOPA + "wildcard_host_rejects_exact_domain", yaml: wild("*.example.com", "port: 443"),
			queries: []compatQuery{nq("example.com", 443, "", false, "")}},
		{source: srcOPA + "wildcard_host_case_insensitive", yaml: wild("*.EXAMPLE.COM", "port: 443"),
			queries: []compatQuery{nq("api.example.com", 443, "", true, "wildcard")}},
		{source: srcOPA + "wildcard_host_plus_port", yaml: wild("*.example.com", "port: 443"),
			queries: []compatQuery{nq("api.example.com", 80, "", false, "")}},
		{source: srcOPA + "wildcard_host_intra_label_matches", yaml: intra, needs: "hostpattern",
			queries: []compatQuery{nq("us-central1-aiplatform.googleapis.com", 443, "", true, "intra_label")}},
		{source: srcOPA + "wildcard_host_intra_label_does_not_cross_dot", yaml: intra, needs: "hostpattern",
			queries: []compatQuery{nq("us-central1.aiplatform.googleapis.com", 443, "", false, "")}},
		{source: srcOPA + "wildcard_host_middle_label_matches_one_region_label", yaml: s3, needs: "hostpattern",
			queries: []compatQuery{nq("my-bucket.s3.us-east-1.amazonaws.com", 443, "", true, "s3")}},
		{source: srcOPA + "wildcard_host_middle_label_does_not_match_missing_bucket_label", yaml: s3, needs: "hostpattern",
			queries: []compatQuery{nq("s3.us-east-1.amazonaws.com", 443, "", false, "")}},
		{source: srcOPA + "wildcard_host_middle_label_does_not_skip_dualstack_label", yaml: s3, needs: "hostpattern",
			queries: []compatQuery{nq("my-bucket.s3.dualstack.us-east-1.amazonaws.com", 443, "", false, "")}},
		{source: srcOPA + "wildcard_host_multi_port", yaml: wild("*.example.com", "ports: [443, 8443]"),
			queries: []compatQuery{nq("api.example.com", 8443, "", true, "wildcard")}},
		{source: srcOPA + "wildcard_host_l7_rules_apply", yaml: wildL7, differs: diffL7,
			queries: []compatQuery{nq("api.example.com", 8080, "", true, "wildcard_l7")}},
		{source: srcOPA + "wildcard_host_l7_endpoint_config_returned", yaml: wildL7,
			queries: []compatQuery{destq(nq("api.example.com", 8080, "", true, "wildcard_l7"), exactNo)}},
		{source: srcOPA + "l7_multi_port_request_evaluation", yaml: multiL7,
			queries: []compatQuery{nq("api.example.com", 8080, "", true, "multi_l7"), nq("api.example.com", 9090, "", true, "multi_l7")}},
		// host_pattern_matches_rego_endpoint_host_semantics: the parity table,
		// as endpoint policies (shapes OpenShell's validation rejects are rejected).
		compatHostRow(srcOPA+"host_pattern_matches_rego_endpoint_host_semantics", "", "api.example.com", "api.example.com", true),
		compatHostRow(srcOPA+"host_pattern_matches_rego_endpoint_host_semantics", "", "api.example.com", "API.EXAMPLE.COM", true),
		compatHostRow(srcOPA+"host_pattern_matches_rego_endpoint_host_semantics", "", "api.example.com", "api.example.org", false),
		compatHostRow(srcOPA+"host_pattern_matches_rego_endpoint_host_semantics", "", "*.example.com", "api.example.com", true),
		compatHostRow(srcOPA+"host_pattern_matches_rego_endpoint_host_semantics", "", "*.example.com", "example.com", false),
		compatHostRow(srcOPA+"host_pattern_matches_rego_endpoint_host_semantics", "", "*.example.com", "deep.api.example.com", false),
		compatHostRow(srcOPA+"host_pattern_matches_rego_endpoint_host_semantics", "hostpattern", "*-api.example.com", "tenant-api.example.com", true),
		compatHostRow(srcOPA+"host_pattern_matches_rego_endpoint_host_semantics", "hostpattern", "*-api.example.com", "api.example.com", false),
		compatHostRow(srcOPA+"host_pattern_matches_rego_endpoint_host_semantics", "hostpattern", "*.a?i.example.com", "x.abi.example.com", true),
		compatHostRow(srcOPA+"host_pattern_matches_rego_endpoint_host_semantics", "hostpattern", "**.example.com", "example.com", false),
		compatHostRow(srcOPA+"host_pattern_matches_rego_endpoint_host_semantics", "hostpattern", "**.example.com", "api.example.com", true),
		compatHostRow(srcOPA+"host_pattern_matches_rego_endpoint_host_semantics", "hostpattern", "**.example.com", "deep.api.example.com", true),
		compatHostReject(srcOPA+"host_pattern_matches_rego_endpoint_host_semantics", "", "api.**.com"),
		compatHostReject(srcOPA+"host_pattern_matches_rego_endpoint_host_semantics", "", "api.**"),
		compatHostReject(srcOPA+"host_pattern_matches_rego_endpoint_host_semantics", "", "*"),
		compatHostReject(srcOPA+"host_pattern_matches_rego_endpoint_host_semantics", "", "**"),
	}
}

// hpRow: a policy with one endpoint host pattern on port 443 for curl, and
// a query for host.
func compatHostRow(source, needs, pattern, host string, match bool) compatRow {
	policy := ""
	if match {
		policy = "p"
	}
	return compatRow{source: source, needs: needs,
		yaml:    compatDoc("", compatNP("p", compatEPs(fmt.Sprintf("{ host: %q, port: 443 }", pattern)), "/usr/bin/curl")),
		queries: []compatQuery{nq(host, 443, "", match, policy)}}
}

// hpReject: a policy whose endpoint host pattern must be rejected; the
// error quotes the pattern.
func compatHostReject(source, needs, pattern string) compatRow {
	return compatRow{source: source, needs: needs,
		yaml:   compatDoc("", compatNP("p", compatEPs(fmt.Sprintf("{ host: %q, port: 443 }", pattern)), "/usr/bin/curl")),
		reject: fmt.Sprintf("%q", pattern)}
}

// --- crates/openshell-policy/src/lib.rs ----------------------------------

func libRows() []compatRow {
	one := func(key string, ep string) string {
		return compatDoc(restrictiveFS, compatNP(key, compatEPs(ep), "/usr/bin/curl"))
	}
	fs := func(readOnly, readWrite string) string {
		return fmt.Sprintf("filesystem_policy:\n  include_workdir: true\n  read_only: %s\n  read_write: %s\nlandlock:\n  compatibility: best_effort\n", readOnly, readWrite)
	}
	var many []string
	for i := range 300 {
		many = append(many, fmt.Sprintf("/path/%d", i))
	}
	long := "/" + strings.Repeat("a", 5000)
	bedrock := func(extra string) string {
		return compatDoc(restrictiveFS, compatNP("aws", compatEPs("host: bedrock-runtime.us-east-1.amazonaws.com\nport: 443\n"+extra)))
	}
	tcpHost := func(host string) string {
		return compatDoc(restrictiveFS, compatNP("native-tcp", compatEPs(fmt.Sprintf("{ host: %q, port: 6379, protocol: tcp }", host))))
	}
	return []compatRow{
		{source: srcLib + "parse_minimal_policy_yaml", yaml: "version: 1\n",
			queries: []compatQuery{nq("example.com", 443, "", false, "")}},
		{source: srcLib + "process_identity_omission_survives_yaml_round_trip", yaml: compatDoc(compatProcess("1234", ""))},
		{source: srcLib + "parse_policy_with_network_rules", needs: "policykey",
			yaml:    compatDoc("", compatNPNamed("test", "test_policy", compatEPs("{ host: example.com, port: 443 }"), "/usr/bin/curl")),
			queries: []compatQuery{nq("example.com", 443, "", true, "test")}},
		{source: srcLib + "parse_l7_query_matchers_and_round_trip",
			yaml:    compatDoc("", compatNP("query_test", compatEPs("host: api.example.com\nport: 8080\nprotocol: rest\nrules:\n  - allow:\n      method: GET\n      path: /download\n      query:\n        slug: \"my-*\"\n        tag:\n          any: [\"foo-*\", \"bar-*\"]"), "/usr/bin/curl")),
			queries: []compatQuery{nq("api.example.com", 8080, "", true, "query_test")}},
		{source: srcLib + "parse_rejects_unknown_fields", yaml: "version: 1\nbogus_field: true\n", reject: "bogus_field"},
		{source: srcLib + "parse_rejects_middleware_attachments_on_network_policies_and_endpoints",
			yaml: "version: 1\nnetwork_policies:\n  api:\n    middleware: [redact]\n    endpoints:\n      - host: api.example.com\n        port: 443\n", reject: "middleware"},
		{source: srcLib + "parse_rejects_middleware_attachments_on_network_policies_and_endpoints",
			yaml: "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: api.example.com\n        port: 443\n        middleware: [redact]\n", reject: "middleware"},
		{source: srcLib + "round_trip_preserves_allowed_ips",
			yaml:    compatDoc("", compatNP("internal", compatEPs("host: db.internal.corp\nport: 5432\nallowed_ips:\n  - \"10.0.5.0/24\"\n  - \"10.0.6.0/24\""), "/usr/bin/curl")),
			queries: []compatQuery{destq(nq("db.internal.corp", 5432, "", true, "internal"), exactYes, "10.0.5.0/24", "10.0.6.0/24")}},
		{source: srcLib + "round_trip_preserves_policy_name", needs: "policykey",
			yaml:    compatDoc("", compatNPNamed("my_api", "my-custom-api-name", compatEPs("{ host: api.example.com, port: 443 }"), "/usr/bin/curl")),
			queries: []compatQuery{nq("api.example.com", 443, "", true, "my_api")}},
		{source: srcLib + "validate_rejects_root_run_as_user", needs: "validation", yaml: compatDoc(restrictiveFS + compatProcess("root", "sandbox")), reject: "run_as_user"},
		{source: srcLib + "validate_rejects_uid_zero", needs: "validation", yaml: compatDoc(restrictiveFS + compatProcess("0", "0")), reject: "run_as_user"},
		{source: srcLib + "validate_rejects_non_sandbox_user", needs: "validation", yaml: compatDoc(restrictiveFS + compatProcess("nobody", "nogroup")), reject: "run_as_user"},
		{source: srcLib + "validate_accepts_sandbox_identity", yaml: compatDoc(restrictiveFS + compatProcess("sandbox", "sandbox"))},
		{source: srcLib + "validate_rejects_path_traversal", yaml: compatDoc(fs("[/usr/../etc/shadow]", "[/tmp]")), reject: "/usr/../etc/shadow"},
		{source: srcLib + "validate_rejects_relative_paths", yaml: compatDoc(fs("[usr/lib]", "[/tmp]")), reject: "usr/lib"},
		{source: srcLib + "validate_rejects_overly_broad_read_write_path", yaml: compatDoc(fs("[/usr]", "[/]")), reject: "whole filesystem"},
		{source: srcLib + "validate_accepts_valid_policy", yaml: compatDoc(restrictiveFS)},
		{source: srcLib + "validate_rejects_yaml_tcp_endpoint_without_host_or_port",
			yaml: "version: 1\nnetwork_policies:\n  invalid:\n    endpoints:\n      - host: \"\"\n        protocol: tcp\n", reject: "port"},
		{source: srcLib + "validate_accepts_hostless_allowed_ips_for_non_tcp_proxy_endpoint", needs: "allowedips",
			yaml:    "version: 1\nnetwork_policies:\n  legacy-proxy:\n    endpoints:\n      - port: 9443\n        allowed_ips:\n          - 10.0.5.0/24\n",
			queries: []compatQuery{{host: "anything.example.com", port: 9443, noIdent: true, allow: true, policy: "legacy-proxy", exact: exactNo, ips: []string{"10.0.5.0/24"}}}},
		{source: srcLib + "validate_rejects_hostless_allowed_ips_for_explicit_tcp",
			yaml: "version: 1\nnetwork_policies:\n  native-tcp:\n    endpoints:\n      - port: 6379\n        protocol: tcp\n        allowed_ips:\n          - 10.0.5.0/24\n", reject: "host"},
		{source: srcLib + "validate_rejects_ip_literal_hosts_for_explicit_tcp", needs: "validation", yaml: tcpHost("192.0.2.10"), reject: "tcp"},
		{source: srcLib + "validate_rejects_ip_literal_hosts_for_explicit_tcp", needs: "validation", yaml: tcpHost("2001:db8::10"), reject: "tcp"},
		{source: srcLib + "validate_rejects_malformed_dns_selectors_for_explicit_tcp", yaml: tcpHost(" db.example.com"), reject: "host"},
		{source: srcLib + "validate_rejects_malformed_dns_selectors_for_explicit_tcp", needs: "validation", yaml: tcpHost("db.example.com."), reject: "tcp"},
		{source: srcLib + "validate_rejects_malformed_dns_selectors_for_explicit_tcp", yaml: tcpHost("db..example.com"), reject: "empty label"},
		{source: srcLib + "validate_rejects_malformed_dns_selectors_for_explicit_tcp", yaml: tcpHost("bad name.example.com"), reject: "host"},
		{source: srcLib + "validate_rejects_malformed_dns_selectors_for_explicit_tcp", yaml: tcpHost(strings.Repeat("a", 64) + ".example.com"), reject: "host"},
		{source: srcLib + "validate_rejects_raw_endpoint_zero_and_out_of_range_ports",
			yaml: compatDoc(restrictiveFS, compatNP("invalid", compatEPs("{ host: database.example.com, ports: [0, 65536], protocol: tcp }"))), reject: "out of range"},
		{source: srcLib + "validate_rejects_raw_endpoint_without_effective_port",
			yaml: compatDoc(restrictiveFS, compatNP("invalid", compatEPs("{ host: database.example.com }"))), reject: "no port"},
		{source: srcLib + "validate_accepts_empty_process", yaml: "version: 1\n"},
		{source: srcLib + "validate_accepts_omitted_process_fields", yaml: compatDoc(restrictiveFS + compatProcess("", ""))},
		{source: srcLib + "validate_accepts_omitted_process_fields", yaml: compatDoc(restrictiveFS + compatProcess("sandbox", ""))},
		{source: srcLib + "validate_accepts_omitted_process_fields", yaml: compatDoc(restrictiveFS + compatProcess("", "1234"))},
		{source: srcLib + "validate_rejects_too_many_paths", needs: "validation", yaml: compatDoc(fs("["+strings.Join(many, ", ")+"]", "[/tmp]")), reject: "256"},
		{source: srcLib + "validate_rejects_path_too_long", needs: "validation", yaml: compatDoc(fs("["+long+"]", "[/tmp]")), reject: "4096"},
		{source: srcLib + "validate_rejects_tld_wildcard", yaml: compatDoc(restrictiveFS, compatNPNamed("bad", "bad-rule", compatEPs(`{ host: "*.com", port: 443 }`))), reject: `"*.com"`},
		{source: srcLib + "validate_rejects_double_star_tld_wildcard", yaml: compatDoc(restrictiveFS, compatNPNamed("bad", "bad-rule", compatEPs(`{ host: "**.org", port: 443 }`))), reject: `"**.org"`},
		{source: srcLib + "validate_rejects_all_host_star_wildcards", yaml: compatDoc(restrictiveFS, compatNPNamed("bad", "bad-rule", compatEPs(`{ host: "*", port: 443 }`))), reject: "every host"},
		{source: srcLib + "validate_rejects_all_host_star_wildcards", yaml: compatDoc(restrictiveFS, compatNPNamed("bad", "bad-rule", compatEPs(`{ host: "**", port: 443 }`))), reject: "every host"},
		{source: srcLib + "validate_accepts_subdomain_wildcard", yaml: compatDoc(restrictiveFS, compatNPNamed("ok", "ok-rule", compatEPs(`{ host: "*.example.com", port: 443 }`)))},
		{source: srcLib + "validate_accepts_middle_label_star_wildcard", needs: "hostpattern", yaml: compatDoc(restrictiveFS, compatNPNamed("ok", "ok-rule", compatEPs(`{ host: "*.s3.*.amazonaws.com", port: 443 }`)))},
		{source: srcLib + "validate_rejects_partial_middle_label_wildcard", yaml: compatDoc(restrictiveFS, compatNPNamed("bad", "bad-rule", compatEPs(`{ host: "*.s3.us-*.amazonaws.com", port: 443 }`))), reject: `"*.s3.us-*.amazonaws.com"`},
		{source: srcLib + "validate_accepts_explicit_domain", yaml: compatDoc(restrictiveFS, compatNPNamed("ok", "ok-rule", compatEPs("{ host: example.com, port: 443 }")))},
		{source: srcLib + "validate_rejects_credential_signing_without_signing_service", needs: "validation", yaml: bedrock("credential_signing: sigv4"), reject: "signing_service"},
		{source: srcLib + "validate_accepts_credential_signing_with_signing_service", yaml: bedrock("credential_signing: sigv4\nsigning_service: bedrock")},
		{source: srcLib + "validate_accepts_sigv4_body_with_signing_service", yaml: bedrock("credential_signing: \"sigv4:body\"\nsigning_service: bedrock")},
		{source: srcLib + "validate_accepts_sigv4_no_body_with_signing_service",
			yaml: compatDoc(restrictiveFS, compatNP("aws", compatEPs("{ host: s3.us-east-1.amazonaws.com, port: 443, credential_signing: \"sigv4:no_body\", signing_service: s3 }")))},
		{source: srcLib + "validate_rejects_sigv4_no_body_without_signing_service", needs: "validation",
			yaml: compatDoc(restrictiveFS, compatNP("aws", compatEPs("{ host: s3.us-east-1.amazonaws.com, port: 443, credential_signing: \"sigv4:no_body\" }"))), reject: "signing_service"},
		{source: srcLib + "validate_rejects_unknown_credential_signing", needs: "validation",
			yaml: compatDoc(restrictiveFS, compatNP("aws", compatEPs("{ host: example.amazonaws.com, port: 443, credential_signing: sigv4_typo, signing_service: bedrock }"))), reject: "credential_signing"},
		{source: srcLib + "validate_rejects_credential_signing_with_body_rewrite", needs: "validation",
			yaml: bedrock("credential_signing: sigv4\nsigning_service: bedrock\nrequest_body_credential_rewrite: true"), reject: "request_body_credential_rewrite"},
		{source: srcLib + "valid_identity_accepts_non_root_numeric_uid", yaml: compatDoc(compatProcess("1", "30"))},
		{source: srcLib + "valid_identity_accepts_non_root_numeric_uid", yaml: compatDoc(compatProcess("500", "999"))},
		{source: srcLib + "valid_identity_accepts_non_root_numeric_uid", yaml: compatDoc(compatProcess("1000", "50000"))},
		{source: srcLib + "valid_identity_accepts_non_root_numeric_uid", yaml: compatDoc(compatProcess("1000660000", "sandbox"))},
		{source: srcLib + "valid_identity_accepts_boundary_uids", yaml: compatDoc(compatProcess("1", "4294967294"))},
		{source: srcLib + "valid_identity_rejects_zero", needs: "validation", yaml: compatDoc(compatProcess("sandbox", "0")), reject: "run_as_group"},
		{source: srcLib + "valid_identity_rejects_invalid_uid_sentinel", needs: "validation", yaml: compatDoc(compatProcess("4294967295", "sandbox")), reject: "run_as_user"},
		{source: srcLib + "valid_identity_rejects_non_numeric_names", needs: "validation", yaml: compatDoc(compatProcess("user", "sandbox")), reject: "run_as_user"},
		{source: srcLib + "validate_accepts_numeric_uid_in_range", yaml: compatDoc(compatProcess("1000", "5000"))},
		{source: srcLib + "validate_accepts_boundary_uids", yaml: compatDoc(compatProcess("1", "4294967294"))},
		{source: srcLib + "validate_accepts_non_root_system_uid", yaml: compatDoc(restrictiveFS + compatProcess("500", "30"))},
		{source: srcLib + "validate_rejects_uid_out_of_range_high", needs: "validation", yaml: compatDoc(restrictiveFS + compatProcess("4294967295", "sandbox")), reject: "run_as_user"},
		{source: srcLib + "validate_rejects_root_string", needs: "validation", yaml: compatDoc(restrictiveFS + compatProcess("root", "sandbox")), reject: "root"},
		{source: srcLib + "validate_rejects_nobody_string", needs: "validation", yaml: compatDoc(restrictiveFS + compatProcess("nobody", "nogroup")), reject: "nobody"},
		{source: srcLib + "validate_accepts_mixed_sandbox_name_and_uid", yaml: compatDoc(compatProcess("sandbox", "1000"))},
		{source: srcLib + "parse_ports_array", yaml: compatDoc("", compatNP("test", compatEPs("{ host: api.example.com, ports: [80, 443] }"), "/usr/bin/curl")),
			queries: []compatQuery{nq("api.example.com", 80, "", true, "test"), nq("api.example.com", 443, "", true, "test"), nq("api.example.com", 8080, "", false, "")}},
		{source: srcLib + "parse_single_port_normalized_to_ports", yaml: one("test", "{ host: api.example.com, port: 443 }"),
			queries: []compatQuery{nq("api.example.com", 443, "", true, "test")}},
		{source: srcLib + "round_trip_preserves_endpoint_path",
			yaml:    compatDoc("", compatNP("test", compatEPs("host: api.example.com\nport: 443\npath: \"/graphql\"\nprotocol: graphql\nrules:\n  - allow:\n      operation_type: query"), "/usr/bin/curl")),
			queries: []compatQuery{nq("api.example.com", 443, "", true, "test")}},
		// OpenShell's round trip only parses; its validation (l7_validate.rs)
		// rejects protocol rest without rules or access, as stockade's load does.
		{source: srcLib + "round_trip_preserves_endpoint_credential_binding", reject: "rules or access",
			yaml: "version: 1\nnetwork_policies:\n  gcp_storage:\n    endpoints:\n      - host: storage.googleapis.com\n        port: 443\n        protocol: rest\n        credential_binding:\n          provider: work-gcp\n"},
		{source: srcLib + "round_trip_preserves_endpoint_credential_binding",
			yaml:    "version: 1\nnetwork_policies:\n  gcp_storage:\n    endpoints:\n      - host: storage.googleapis.com\n        port: 443\n        protocol: rest\n        access: full\n        credential_binding:\n          provider: work-gcp\n    binaries:\n      - { path: /usr/bin/curl }\n",
			queries: []compatQuery{nq("storage.googleapis.com", 443, "", true, "gcp_storage")}},
		{source: srcLib + "round_trip_preserves_multi_port", yaml: one("test", "{ host: api.example.com, ports: [443, 8443] }"),
			queries: []compatQuery{nq("api.example.com", 8443, "", true, "test")}},
		{source: srcLib + "parse_wildcard_host", yaml: one("test", `{ host: "*.example.com", port: 443 }`),
			queries: []compatQuery{nq("a.example.com", 443, "", true, "test")}},
		{source: srcLib + "parse_deny_rules_from_yaml",
			yaml:    compatDoc("", compatNP("github", compatEPs("host: api.github.com\nport: 443\nprotocol: rest\naccess: read-write\ndeny_rules:\n  - { method: POST, path: \"/repos/*/pulls/*/reviews\" }\n  - { method: PUT, path: \"/repos/*/branches/*/protection\" }"), "/usr/bin/curl")),
			queries: []compatQuery{nq("api.github.com", 443, "", true, "github")}},
		{source: srcLib + "parse_deny_rules_with_query_any",
			yaml: compatDoc("", compatNP("test", compatEPs("host: api.example.com\nport: 443\nprotocol: rest\naccess: full\ndeny_rules:\n  - method: POST\n    path: /action\n    query:\n      type:\n        any: [\"admin-*\", \"root-*\"]"), "/usr/bin/curl"))},
		{source: srcLib + "round_trip_preserves_graphql_policy_fields",
			yaml: compatDoc("", compatNP("github_graphql", compatEPs("host: api.github.com\nport: 443\nprotocol: graphql\nenforcement: enforce\npersisted_queries: allow_registered\ngraphql_max_body_bytes: 131072\ngraphql_persisted_queries:\n  abc123: { operation_type: query, operation_name: Viewer, fields: [viewer] }\nrules:\n  - allow: { operation_type: query, fields: [viewer, repository] }\n  - allow: { operation_type: mutation, operation_name: \"Issue*\", fields: [createIssue] }\ndeny_rules:\n  - { operation_type: mutation }"), "/usr/bin/curl"))},
		{source: srcLib + "round_trip_preserves_json_rpc_max_body_bytes",
			yaml: compatDoc("", compatNP("jsonrpc_api", compatEPs("host: jsonrpc.example.com\nport: 443\nprotocol: json-rpc\nenforcement: enforce\njson_rpc:\n  max_body_bytes: 131072\nrules:\n  - allow: { method: initialize }"), "/usr/bin/curl"))},
		{source: srcLib + "parse_mcp_rules_to_runtime_fields",
			yaml: compatDoc("", compatNP("mcp", compatEPs("host: mcp.example.com\nport: 443\npath: /mcp\nprotocol: mcp\nenforcement: enforce\nmcp:\n  max_body_bytes: 131072\n  strict_tool_names: false\nrules:\n  - allow: { method: initialize }\n  - allow: { method: tools/list }"), "/usr/bin/curl"))},
		{source: srcLib + "parse_rejects_unsupported_json_rpc_config_fields", needs: "validation", reject: "json_rpc",
			yaml: compatDoc("", compatNP("jsonrpc_api", compatEPs("host: jsonrpc.example.com\nport: 443\nprotocol: json-rpc\njson_rpc:\n  max_body_bytes: 131072\n  on_parse_error: deny\n  batch_policy: all\naccess: full"), "/usr/bin/curl"))},
		{source: srcLib + "round_trip_preserves_websocket_credential_rewrite",
			yaml: compatDoc("", compatNP("discord_gateway", compatEPs("{ host: gateway.example.com, port: 443, protocol: rest, enforcement: enforce, access: full, websocket_credential_rewrite: true }"), "/usr/bin/node"))},
		{source: srcLib + "round_trip_preserves_request_body_credential_rewrite",
			yaml: compatDoc("", compatNP("api", compatEPs("{ host: api.example.com, port: 443, protocol: rest, access: full, request_body_credential_rewrite: true }"), "/usr/bin/curl"))},
		{source: srcLib + "round_trip_preserves_allow_uninspected_credentials",
			yaml: compatDoc("", compatNP("api", compatEPs("{ host: api.example.com, port: 443, protocol: rest, access: full, allow_uninspected_credentials: true }"), "/usr/bin/curl"))},
		{source: srcLib + "parse_rejects_unknown_fields_in_deny_rule", needs: "validation", reject: "deny_rules",
			yaml: "version: 1\nnetwork_policies:\n  test:\n    endpoints:\n      - host: example.com\n        port: 443\n        deny_rules:\n          - method: POST\n            path: /foo\n            bogus: true\n"},
		{source: srcLib + "rejects_port_above_65535", yaml: "version: 1\nnetwork_policies:\n  test:\n    endpoints:\n      - host: example.com\n        port: 70000\n", reject: "out of range"},
	}
}

// --- crates/openshell-policy/src/l7_validate.rs --------------------------

// l7ep is a policy with one api.example.com:443 endpoint carrying the
// given extra (block) fields.
func l7ep(fields string) string {
	return compatDoc("", compatNP("api", compatEPs("host: api.example.com\nport: 443\n"+fields), "/usr/bin/curl"))
}

func l7ValidateRows() []compatRow {
	r := func(test, fields, reject, needs string) compatRow {
		row := compatRow{source: srcL7 + test, yaml: l7ep(fields), reject: reject, needs: needs}
		if reject == "" {
			row.queries = []compatQuery{nq("api.example.com", 443, "", true, "api")}
		}
		return row
	}
	const allowAll = "rules:\n  - allow: { method: \"*\" }"
	return []compatRow{
		r("valid_endpoint_produces_no_errors", "protocol: rest\naccess: read-only", "", ""),
		r("rejects_unknown_protocol", "protocol: ftp", "protocol", "validation"),
		r("rejects_rules_and_access_together", "protocol: rest\naccess: full\n"+allowAll, "access", "validation"),
		r("rejects_jsonrpc_with_access_presets", "protocol: json-rpc\naccess: full", "access", "validation"),
		r("rejects_mcp_with_access_presets", "protocol: mcp\naccess: full", "access", "validation"),
		r("rejects_jsonrpc_without_rules", "protocol: json-rpc", "rules", "validation"),
		r("rejects_protocol_without_rules_or_access", "protocol: rest", "rules", "validation"),
		r("rejects_mcp_without_rules_when_allow_all_false", "protocol: mcp\nmcp:\n  allow_all_known_mcp_methods: false", "rules", "validation"),
		r("accepts_mcp_with_allow_all_true", "protocol: mcp\nmcp:\n  allow_all_known_mcp_methods: true", "", ""),
		r("rejects_rules_that_deny_all", "protocol: rest\nrules:\n  - allow: {}", "rules", "validation"),
		r("mcp_allow_all_with_empty_allow_not_rejected", "protocol: mcp\nmcp:\n  allow_all_known_mcp_methods: true\nrules:\n  - allow: {}", "", ""),
		r("rejects_deny_rules_without_protocol", "deny_rules:\n  - { method: POST, path: /foo }", "deny_rules", "validation"),
		r("rejects_deny_rules_without_allow_base", "protocol: rest\ndeny_rules:\n  - { method: POST, path: /foo }", "deny_rules", "validation"),
		r("no_protocol_no_errors", "", "", ""),
		r("explicit_tcp_is_valid_without_l7_fields", "protocol: tcp", "", ""),
		r("explicit_tcp_is_valid_without_l7_fields", "protocol: TCP", "", ""),
		r("explicit_tcp_rejects_l7_fields", "protocol: tcp\naccess: full", "tcp", "validation"),
		r("explicit_tcp_rejects_additional_l7_fields", "protocol: tcp\nenforcement: enforce\ncredential_signing: sigv4\nsigning_service: bedrock", "tcp", "validation"),
		r("explicit_tcp_rejects_additional_l7_fields", "protocol: rest\nenforcement: enforce\naccess: full", "", ""),
		r("l7_protocol_parse_known_variants", "protocol: REST\naccess: full", "", ""),
		r("l7_protocol_parse_known_variants", "protocol: websocket\n"+allowAll, "", ""),
		r("l7_protocol_parse_known_variants", "protocol: graphql\naccess: full", "", ""),
		r("l7_protocol_parse_known_variants", "protocol: sql\naccess: full", "", ""),
		r("l7_protocol_parse_known_variants", "protocol: JSON-RPC\n"+allowAll, "", ""),
		r("l7_protocol_parse_known_variants", "protocol: Mcp\n"+allowAll, "", ""),
		r("l7_protocol_parse_known_variants", "protocol: unknown", "protocol", "validation"),
		r("jsonrpc_with_access_emits_single_diagnostic", "protocol: json-rpc\naccess: full", "access", "validation"),
		r("jsonrpc_without_rules_or_access_emits_single_diagnostic", "protocol: json-rpc", "rules", "validation"),
	}
}

// --- crates/openshell-policy/src/ambiguity.rs ----------------------------

func ambiguityRows() []compatRow {
	// pair is ambiguity.rs's policy_with: "left" (curl) and "right" (bash),
	// one endpoint each.
	pair := func(left, right string) string {
		return compatDoc("", compatNP("left", compatEPs(left), "/usr/bin/curl"), compatNP("right", compatEPs(right), "/usr/bin/bash"))
	}
	ok := func(test, left, right string, qs ...compatQuery) compatRow {
		return compatRow{source: srcAmb + test, yaml: pair(left, right), queries: qs}
	}
	bad := func(test, left, right, reject string) compatRow {
		return compatRow{source: srcAmb + test, needs: "validation", yaml: pair(left, right), reject: reject}
	}
	rest := func(extra string) string {
		return "host: api.example.com\nport: 443\nprotocol: rest\n" + extra
	}
	return []compatRow{
		ok("exact_and_wildcard_hosts_overlap", "{ host: api.example.com, port: 443 }", `{ host: "*.example.com", port: 443 }`,
			nq("api.example.com", 443, "", true, "left"), nq("api.example.com", 443, "/usr/bin/bash", true, "right"),
			nq("other.example.com", 443, "/usr/bin/curl", false, "")),
		{source: srcAmb + "exact_and_wildcard_hosts_overlap", needs: "hostpattern",
			yaml: pair("{ host: us-aiplatform.googleapis.com, port: 443 }", `{ host: "*-aiplatform.googleapis.com", port: 443 }`),
			queries: []compatQuery{
				nq("us-aiplatform.googleapis.com", 443, "/usr/bin/bash", true, "right"),
				nq("eu-aiplatform.googleapis.com", 443, "/usr/bin/curl", false, ""),
			}},
		ok("intersecting_wildcards_are_detected", `{ host: "*.example.com", port: 443 }`, `{ host: "*.example.org", port: 443 }`,
			nq("api.example.org", 443, "/usr/bin/curl", false, ""), nq("api.example.com", 443, "/usr/bin/curl", true, "left")),
		bad("intersecting_wildcards_are_detected", `{ host: "**.example.com", port: 443, tls: skip }`, "{ host: api.example.com, port: 443 }", "tls"),
		ok("disjoint_ports_do_not_overlap", "{ host: api.example.com, port: 443, tls: skip }", "{ host: api.example.com, port: 8443 }",
			nq("api.example.com", 443, "", true, "left"), nq("api.example.com", 8443, "/usr/bin/bash", true, "right")),
		ok("compatible_request_rules_may_overlap", rest("tls: skip\naccess: read-only"), rest("tls: skip\naccess: read-write"),
			nq("api.example.com", 443, "", true, "left")),
		ok("plain_l4_endpoint_does_not_compete_with_l7_endpoint_metadata", "{ host: api.example.com, port: 443 }", rest("enforcement: enforce\naccess: full"),
			nq("api.example.com", 443, "/usr/bin/bash", true, "right")),
		ok("disjoint_path_specific_protocols_may_overlap", "host: api.example.com\nport: 443\npath: /graphql\nprotocol: graphql\naccess: full", rest("path: \"/repos/**\"\naccess: full"),
			nq("api.example.com", 443, "", true, "left")),
		bad("question_mark_path_overlap_is_detected", rest("path: \"/v?\"\naccess: full"), "host: api.example.com\nport: 443\npath: /v1\nprotocol: graphql\naccess: full", "protocol"),
		bad("overlapping_character_class_paths_are_detected", rest("path: \"/v[12]\"\naccess: full"), "host: api.example.com\nport: 443\npath: \"/v[23]\"\nprotocol: graphql\naccess: full", "protocol"),
		ok("disjoint_character_class_paths_may_overlap_by_host_and_port", rest("path: \"/v[12]\"\naccess: full"), "host: api.example.com\nport: 443\npath: \"/v[34]\"\nprotocol: graphql\naccess: full",
			nq("api.example.com", 443, "", true, "left")),
		ok("more_specific_path_may_override_request_pipeline_metadata", rest("enforcement: enforce\naccess: full"), "host: api.example.com\nport: 443\npath: /graphql\nprotocol: graphql\nenforcement: enforce\naccess: full",
			nq("api.example.com", 443, "/usr/bin/bash", true, "right")),
		bad("exact_wildcard_tls_conflict_is_rejected", `{ host: "*.example.com", port: 443, tls: skip }`, "{ host: api.example.com, port: 443 }", "tls"),
		ok("allowed_ip_conflict_is_rejected_regardless_of_order", `{ host: api.example.com, port: 443, allowed_ips: ["10.0.1.0/24", "10.0.0.0/24"] }`, `{ host: api.example.com, port: 443, allowed_ips: ["10.0.0.0/24", "10.0.1.0/24"] }`,
			destq(nq("api.example.com", 443, "", true, "left"), exactYes, "10.0.0.0/24", "10.0.1.0/24")),
		bad("allowed_ip_conflict_is_rejected_regardless_of_order", `{ host: api.example.com, port: 443, allowed_ips: ["10.0.1.0/24", "10.0.0.0/24"] }`, `{ host: api.example.com, port: 443, allowed_ips: ["10.0.2.0/24"] }`, "allowed_ips"),
		bad("credential_and_parser_conflicts_are_rejected_on_same_path", rest("access: full\ncredential_signing: sigv4\nsigning_service: execute-api"), rest("access: full\ncredential_signing: sigv4\nsigning_service: bedrock\nallow_encoded_slash: true"), "signing_service"),
		bad("json_rpc_body_limit_is_compared_only_within_the_same_protocol",
			"host: api.example.com\nport: 443\nprotocol: json-rpc\njson_rpc: { max_body_bytes: 1024 }\nrules:\n  - allow: { method: \"*\" }",
			"host: api.example.com\nport: 443\nprotocol: mcp\nmcp: { max_body_bytes: 2048, allow_all_known_mcp_methods: true }", "protocol"),
		bad("json_rpc_body_limit_is_compared_only_within_the_same_protocol",
			"host: api.example.com\nport: 443\nprotocol: mcp\nmcp: { max_body_bytes: 2048, allow_all_known_mcp_methods: true }",
			"host: api.example.com\nport: 443\nprotocol: mcp\nmcp: { max_body_bytes: 4096, allow_all_known_mcp_methods: true }", "max_body_bytes"),
		bad("credential_binding_conflicts_are_rejected_on_same_endpoint",
			rest("access: full\ncredential_binding: { provider: provider-a }"), rest("access: full\ncredential_binding: { provider: provider-b }"), "credential_binding"),
		bad("websocket_graphql_classification_conflict_is_rejected",
			"host: api.example.com\nport: 443\nprotocol: websocket\nrules:\n  - allow: { operation_type: subscription }",
			"host: api.example.com\nport: 443\nprotocol: websocket\nrules:\n  - allow: { method: WEBSOCKET_TEXT }", "websocket"),
		ok("matching_websocket_graphql_classification_is_compatible",
			"host: api.example.com\nport: 443\nprotocol: websocket\npersisted_queries: allow_registered\nrules:\n  - allow: { method: \"*\" }",
			"host: api.example.com\nport: 443\nprotocol: websocket\npersisted_queries: allow_registered\nrules:\n  - allow: { operation_name: Events }",
			nq("api.example.com", 443, "", true, "left")),
		bad("different_binary_lists_do_not_hide_endpoint_ambiguity", "{ host: api.example.com, port: 443, tls: skip }", "{ host: api.example.com, port: 443 }", "tls"),
		bad("explicit_tcp_and_omitted_protocol_are_ambiguous_for_native_tcp_eligibility", "{ host: api.example.com, port: 443, protocol: tcp, tls: skip }", "{ host: api.example.com, port: 443, tls: skip }", "protocol"),
	}
}

// --- crates/openshell-supervisor-network/src/proxy/destination.rs --------

func destinationRows() []compatRow {
	return []compatRow{
		{source: srcDst + "default_mode_classifies_loopback_as_internal_address", differs: diffSSRFLayer,
			yaml:    compatDoc("", compatNP("loop", compatEPs("{ host: 127.0.0.1, port: 80 }"), "/**")),
			queries: []compatQuery{destq(nq("127.0.0.1", 80, "", true, "loop"), exactYes)}},
		{source: srcDst + "invalid_allowed_ips_has_a_distinct_denial_kind", reject: "not-an-ip",
			differs: "stockade rejects a malformed allowed_ips entry at load (file:line:col); OpenShell accepts the policy and denies each connection with InvalidAllowedIps",
			yaml:    compatDoc("", compatNP("p", compatEPs(`{ host: api.example.test, port: 443, allowed_ips: [not-an-ip] }`), "/usr/bin/curl"))},
		{source: srcDst + "declared_endpoint_preserves_its_denial_classification", differs: diffSSRFLayer,
			yaml:    compatDoc("", compatNP("p", compatEPs("{ host: loopback.example, port: 80 }"), "/usr/bin/curl")),
			queries: []compatQuery{destq(nq("loopback.example", 80, "", true, "p"), exactYes)}},
		{source: srcDst + "address_filter_retains_public_answer_from_mixed_set",
			yaml:    compatDoc("", compatNP("p", compatEPs(`{ host: "*.corp.example", port: 443 }`), "/usr/bin/curl")),
			queries: []compatQuery{destq(nq("mixed.corp.example", 443, "", true, "p"), exactNo)}},
		{source: srcDst + "address_filter_exact_host_allows_private_but_not_always_blocked",
			yaml:    compatDoc("", compatNP("p", compatEPs("{ host: private.example, port: 443 }"), "/usr/bin/curl")),
			queries: []compatQuery{destq(nq("private.example", 443, "", true, "p"), exactYes)}},
		{source: srcDst + "address_filter_enforces_allowed_ips",
			yaml:    compatDoc("", compatNP("p", compatEPs(`{ host: allowlisted.example, port: 443, allowed_ips: ["10.2.0.0/16"] }`), "/usr/bin/curl")),
			queries: []compatQuery{destq(nq("allowlisted.example", 443, "", true, "p"), exactYes, "10.2.0.0/16")}},
		{source: srcDst + "address_filter_rejects_always_blocked_only_answer", reject: "loopback", differs: diffLoopback,
			yaml: compatDoc("", compatNP("p", compatEPs(`{ host: loopback.example, port: 443, allowed_ips: ["127.0.0.1/32"] }`), "/usr/bin/curl"))},
		{source: srcDst + "validation_mode_precedence_is_explicit_and_stable",
			yaml:    compatDoc("", compatNP("p", compatEPs(`{ host: 10.2.3.4, port: 443, allowed_ips: ["10.0.0.0/8"] }`), "/usr/bin/curl")),
			queries: []compatQuery{destq(nq("10.2.3.4", 443, "", true, "p"), exactYes, "10.0.0.0/8")}},
		{source: srcDst + "validation_mode_precedence_is_explicit_and_stable",
			yaml:    compatDoc("", compatNP("p", compatEPs("{ host: 10.2.3.4, port: 443 }"), "/usr/bin/curl")),
			queries: []compatQuery{destq(nq("10.2.3.4", 443, "", true, "p"), exactYes)}},
		{source: srcDst + "validation_mode_precedence_is_explicit_and_stable",
			yaml:    compatDoc("", compatNP("p", compatEPs(`{ host: "*.example.com", port: 443 }`), "/usr/bin/curl")),
			queries: []compatQuery{destq(nq("a.example.com", 443, "", true, "p"), exactNo)}},
		{source: srcDst + "address_filter_rejects_control_plane_port", differs: diffSSRFLayer + "; control-plane ports are the boundary's contract list",
			yaml:    compatDoc("", compatNP("p", compatEPs("{ host: api.example, port: 6443 }"), "/usr/bin/curl")),
			queries: []compatQuery{nq("api.example", 6443, "", true, "p")}},
	}
}

// --- crates/openshell-core/src/host_pattern.rs ----------------------------

func hostPatternRows() []compatRow {
	hp := func(test, needs, pattern, host string, match bool) compatRow {
		return compatHostRow(srcHP+test, needs, pattern, host, match)
	}
	rej := func(test, needs, pattern string) compatRow { return compatHostReject(srcHP+test, needs, pattern) }
	return []compatRow{
		hp("host_matching_is_case_insensitive", "", "*.Example.COM", "API.example.com", true),
		hp("host_matching_is_case_insensitive", "", "*.example.com", "example.com", false),
		hp("host_matching_is_case_insensitive", "", "*.example.com", "deep.api.example.com", false),
		hp("host_matching_is_case_insensitive", "hostpattern", "**.example.com", "deep.api.example.com", true),
		hp("host_matching_is_case_insensitive", "hostpattern", "*-api.example.com", "tenant-api.example.com", true),
		rej("host_matching_is_case_insensitive", "", "*"),
		{source: srcHP + "host_matching_rejects_invalid_patterns", reject: "empty",
			yaml: compatDoc("", compatNP("p", compatEPs(`{ host: "", port: 443 }`), "/usr/bin/curl"))},
		rej("host_matching_rejects_invalid_patterns", "", "api .example.com"),
		rej("host_matching_rejects_invalid_patterns", "", "api[.example.com"),
		rej("host_matching_rejects_invalid_patterns", "", "*.{prod,staging}.example.com"),
		rej("host_matching_rejects_invalid_patterns", "", "api**.example.com"),
		hp("recursive_wildcard_requires_at_least_one_label", "hostpattern", "**.example.com", "api.example.com", true),
		hp("recursive_wildcard_requires_at_least_one_label", "hostpattern", "**.example.com", "example.com", false),
		rej("recursive_wildcard_requires_at_least_one_label", "", "api.**.com"),
		rej("universal_wildcard_matches_any_host", "", "**"),
		// Overlap of two patterns, as two policies: a host both admit is allowed
		// by each one's binary; the pair loads (no conflicting metadata).
		{source: srcHP + "host_pattern_overlap_handles_concrete_and_wildcard_hosts", needs: "hostpattern",
			yaml: compatDoc("", compatNP("wide", compatEPs(`{ host: "**.example.com", port: 443 }`), "/usr/bin/curl"), compatNP("narrow", compatEPs(`{ host: "*.api.example.com", port: 443 }`), "/usr/bin/bash")),
			queries: []compatQuery{
				nq("x.api.example.com", 443, "/usr/bin/curl", true, "wide"),
				nq("x.api.example.com", 443, "/usr/bin/bash", true, "narrow"),
				nq("example.com", 443, "/usr/bin/curl", false, ""),
			}},
		{source: srcHP + "host_pattern_overlap_handles_concrete_and_wildcard_hosts",
			yaml: compatDoc("", compatNP("a", compatEPs(`{ host: "*.example.com", port: 443, tls: skip }`), "/usr/bin/curl"), compatNP("b", compatEPs(`{ host: "*.other.com", port: 443 }`), "/usr/bin/bash")),
			queries: []compatQuery{
				nq("x.example.com", 443, "/usr/bin/curl", true, "a"),
				nq("x.other.com", 443, "/usr/bin/bash", true, "b"),
			}},
		{source: srcHP + "host_pattern_overlap_handles_concrete_and_wildcard_hosts",
			yaml: compatDoc("", compatNP("a", compatEPs(`{ host: "*.example.com", port: 443, tls: skip }`), "/usr/bin/curl"), compatNP("b", compatEPs("{ host: deep.api.example.com, port: 443 }"), "/usr/bin/bash")),
			queries: []compatQuery{
				nq("deep.api.example.com", 443, "/usr/bin/curl", false, ""),
				nq("deep.api.example.com", 443, "/usr/bin/bash", true, "b"),
			}},
		{source: srcHP + "host_pattern_overlap_handles_concrete_and_wildcard_hosts", needs: "validation", reject: "tls",
			yaml: compatDoc("", compatNP("a", compatEPs(`{ host: "**.example.com", port: 443, tls: skip }`), "/usr/bin/curl"), compatNP("b", compatEPs("{ host: deep.api.example.com, port: 443 }"), "/usr/bin/bash"))},
	}
}

// --- e2e/python/test_sandbox_policy.py -----------------------------------

func e2eRows() []compatRow {
	py := "/sandbox/.uv/python/cpython-3.12/bin/python3.12"
	pyPolicy := compatDoc(e2eBase, compatNP("python", compatEPs("{ host: api.openai.com, port: 443 }"), "/sandbox/.uv/python/**/python*"))
	anyBin := func(key, ep string) string { return compatDoc(e2eBase, compatNP(key, compatEPs(ep), "/**")) }
	const sandboxIP, fwdPort = "10.200.0.2", 19876
	return []compatRow{
		{source: srcE2E + "test_policy_applies_to_exec_commands", yaml: pyPolicy,
			queries: []compatQuery{nq("api.openai.com", 443, py, true, "python")}},
		{source: srcE2E + "test_policy_blocks_unauthorized_proxy_connect", yaml: pyPolicy,
			queries: []compatQuery{nq("example.com", 443, py, false, "")}},
		{source: srcE2E + "test_l4_no_policy_denies_all", yaml: anyBin("other", "{ host: example.com, port: 443 }"),
			queries: []compatQuery{nq("api.anthropic.com", 443, py, false, ""), nq("example.com", 443, py, true, "other")}},
		{source: srcE2E + "test_l4_wildcard_binary_allows_any_binary", yaml: anyBin("wildcard", "{ host: api.anthropic.com, port: 443 }"),
			queries: []compatQuery{nq("api.anthropic.com", 443, py, true, "wildcard"), nq("example.com", 443, py, false, "")}},
		{source: srcE2E + "test_l4_binary_restricted_denies_wrong_binary",
			yaml:    compatDoc(e2eBase, compatNP("curl_only", compatEPs("{ host: api.anthropic.com, port: 443 }"), "/usr/bin/curl")),
			queries: []compatQuery{nq("api.anthropic.com", 443, py, false, ""), nq("api.anthropic.com", 443, "/usr/bin/curl", true, "curl_only")}},
		{source: srcE2E + "test_l4_wrong_port_denied", yaml: anyBin("anthropic", "{ host: api.anthropic.com, port: 443 }"),
			queries: []compatQuery{nq("api.anthropic.com", 443, py, true, "anthropic"), nq("api.anthropic.com", 80, py, false, "")}},
		{source: srcE2E + "test_l4_cross_policy_denied",
			yaml: compatDoc(e2eBase,
				compatNP("anthropic", compatEPs("{ host: api.anthropic.com, port: 443 }"), "/sandbox/.uv/python/**/python*"),
				compatNP("other", compatEPs("{ host: example.com, port: 443 }"), "/usr/bin/curl")),
			queries: []compatQuery{nq("api.anthropic.com", 443, py, true, "anthropic"), nq("example.com", 443, py, false, ""), nq("example.com", 443, "/usr/bin/curl", true, "other")}},
		{source: srcE2E + "test_l4_log_fields", yaml: anyBin("anthropic", "{ host: api.anthropic.com, port: 443 }"),
			queries: []compatQuery{nq("api.anthropic.com", 443, py, true, "anthropic"), nq("example.com", 443, py, false, "")}},
		{source: srcE2E + "test_ssrf_blocks_loopback_despite_policy_allow", yaml: anyBin("internal", "{ host: 127.0.0.1, port: 80 }"), differs: diffSSRFLayer,
			queries: []compatQuery{destq(nq("127.0.0.1", 80, py, true, "internal"), exactYes)}},
		{source: srcE2E + "test_ssrf_blocks_metadata_endpoint_despite_policy_allow", yaml: anyBin("metadata", "{ host: 169.254.169.254, port: 80 }"), differs: diffSSRFLayer,
			queries: []compatQuery{destq(nq("169.254.169.254", 80, py, true, "metadata"), exactYes)}},
		{source: srcE2E + "test_ssrf_allowed_ips_permits_private_ip", yaml: anyBin("internal", `{ host: 10.200.0.1, port: 19999, allowed_ips: ["10.200.0.0/24"] }`),
			queries: []compatQuery{destq(nq("10.200.0.1", 19999, py, true, "internal"), exactYes, "10.200.0.0/24")}},
		{source: srcE2E + "test_ssrf_allowed_ips_hostless_permits_private_ip", needs: "allowedips", yaml: anyBin("private_net", `{ port: 19999, allowed_ips: ["10.200.0.0/24"] }`),
			queries: []compatQuery{destq(nq("10.200.0.1", 19999, py, true, "private_net"), exactNo, "10.200.0.0/24")}},
		{source: srcE2E + "test_ssrf_private_ip_allowed_with_literal_ip_host", yaml: anyBin("internal", "{ host: 10.200.0.1, port: 19999 }"),
			queries: []compatQuery{destq(nq("10.200.0.1", 19999, py, true, "internal"), exactYes)}},
		{source: srcE2E + "test_ssrf_loopback_blocked_even_with_allowed_ips", reject: "loopback", differs: diffLoopback,
			yaml: anyBin("internal", `{ host: 127.0.0.1, port: 80, allowed_ips: ["127.0.0.0/8"] }`)},
		{source: srcE2E + "test_l7_tls_full_access_allows_all", yaml: anyBin("anthropic", "{ host: api.anthropic.com, port: 443, protocol: rest, tls: terminate, enforcement: enforce, access: full }"),
			queries: []compatQuery{nq("api.anthropic.com", 443, py, true, "anthropic")}},
		{source: srcE2E + "test_l7_tls_read_only_denies_post", differs: diffL7, yaml: anyBin("anthropic", "{ host: api.anthropic.com, port: 443, protocol: rest, tls: terminate, enforcement: enforce, access: read-only }"),
			queries: []compatQuery{nq("api.anthropic.com", 443, py, true, "anthropic")}},
		{source: srcE2E + "test_l7_tls_audit_mode_allows_but_logs", yaml: anyBin("anthropic", "{ host: api.anthropic.com, port: 443, protocol: rest, tls: terminate, enforcement: audit, access: read-only }"),
			queries: []compatQuery{nq("api.anthropic.com", 443, py, true, "anthropic")}},
		{source: srcE2E + "test_l7_tls_explicit_path_rules", differs: diffL7,
			yaml:    anyBin("anthropic", "host: api.anthropic.com\nport: 443\nprotocol: rest\ntls: terminate\nenforcement: enforce\nrules:\n  - allow: { method: GET, path: \"/v1/**\" }"),
			queries: []compatQuery{nq("api.anthropic.com", 443, py, true, "anthropic")}},
		{source: srcE2E + "test_l7_tls_ca_trust_store_injected", yaml: anyBin("any", "{ host: example.com, port: 443 }"),
			queries: []compatQuery{nq("example.com", 443, py, true, "any")}},
		{source: srcE2E + "test_l7_query_matchers_enforced", differs: diffL7,
			yaml:    anyBin("query_api", "host: api.anthropic.com\nport: 443\nprotocol: rest\ntls: terminate\nenforcement: enforce\nrules:\n  - allow: { method: GET, path: \"/v1/**\", query: { tag: \"foo-*\" } }"),
			queries: []compatQuery{nq("api.anthropic.com", 443, py, true, "query_api")}},
		{source: srcE2E + "test_forward_proxy_allows_private_ip_with_allowed_ips", yaml: anyBin("internal", fmt.Sprintf(`{ host: %s, port: %d, allowed_ips: ["10.200.0.0/24"] }`, sandboxIP, fwdPort)),
			queries: []compatQuery{destq(nq(sandboxIP, fwdPort, py, true, "internal"), exactYes, "10.200.0.0/24")}},
		{source: srcE2E + "test_forward_proxy_allows_private_ip_host_without_allowed_ips", yaml: anyBin("internal", fmt.Sprintf("{ host: %s, port: %d }", sandboxIP, fwdPort)),
			queries: []compatQuery{destq(nq(sandboxIP, fwdPort, py, true, "internal"), exactYes)}},
		{source: srcE2E + "test_forward_proxy_denied_no_policy_match", yaml: anyBin("internal", `{ host: 10.200.0.1, port: 9999, allowed_ips: ["10.200.0.0/24"] }`),
			queries: []compatQuery{nq(sandboxIP, fwdPort, py, false, "")}},
		{source: srcE2E + "test_forward_proxy_public_ip_denied", differs: diffSSRFLayer + "; OpenShell's forward proxy (plain-HTTP GET) additionally refuses public addresses, a proxy-mode rule outside policy",
			yaml:    anyBin("public", `{ host: example.com, port: 80, allowed_ips: ["93.184.0.0/16"] }`),
			queries: []compatQuery{destq(nq("example.com", 80, py, true, "public"), exactYes, "93.184.0.0/16")}},
		{source: srcE2E + "test_multi_port_allows_all_listed_ports", yaml: anyBin("multi", "{ host: api.anthropic.com, ports: [443, 80] }"),
			queries: []compatQuery{nq("api.anthropic.com", 443, py, true, "multi"), nq("api.anthropic.com", 80, py, true, "multi")}},
		{source: srcE2E + "test_multi_port_denies_unlisted_port", yaml: anyBin("multi", "{ host: api.anthropic.com, ports: [443, 80] }"),
			queries: []compatQuery{nq("api.anthropic.com", 8080, py, false, "")}},
		{source: srcE2E + "test_single_port_backwards_compat", yaml: anyBin("compat", "{ host: api.anthropic.com, port: 443 }"),
			queries: []compatQuery{nq("api.anthropic.com", 443, py, true, "compat"), nq("api.anthropic.com", 80, py, false, "")}},
		{source: srcE2E + "test_host_wildcard_matches_subdomain", yaml: anyBin("wildcard", `{ host: "*.example.com", port: 443 }`),
			queries: []compatQuery{nq("www.example.com", 443, py, true, "wildcard"), nq("example.com", 443, py, false, "")}},
		{source: srcE2E + "test_host_wildcard_rejects_bare_domain", yaml: anyBin("wildcard", `{ host: "*.example.com", port: 443 }`),
			queries: []compatQuery{nq("example.com", 443, py, false, "")}},
		{source: srcE2E + "test_host_wildcard_rejects_deep_subdomain", yaml: anyBin("wildcard", `{ host: "*.example.com", port: 443 }`),
			queries: []compatQuery{nq("deep.www.example.com", 443, py, false, "")}},
		{source: srcE2E + "test_overlapping_policies_with_conflicting_destination_metadata_are_rejected", needs: "validation", reject: "allowed_ips",
			yaml: compatDoc(e2eBase,
				compatNP("user_rule", compatEPs(fmt.Sprintf("{ host: %s, port: %d }", sandboxIP, fwdPort)), "/**"),
				compatNP("approved_rule", compatEPs(fmt.Sprintf(`{ host: %s, port: %d, allowed_ips: ["10.200.0.0/24"] }`, sandboxIP, fwdPort)), "/**"))},
		{source: srcE2E + "test_overlapping_policies_l7_connect_does_not_crash",
			yaml: compatDoc(e2eBase,
				compatNP("user_api", compatEPs("{ host: api.anthropic.com, port: 443, protocol: rest, enforcement: enforce, access: read-only }"), "/**"),
				compatNP("auto_approved_api", compatEPs("{ host: api.anthropic.com, port: 443, protocol: rest, enforcement: enforce, access: read-only }"), "/**")),
			queries: []compatQuery{nq("api.anthropic.com", 443, py, true, "")}},
	}
}
