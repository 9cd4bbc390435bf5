// docs/grants.md:149, copied by scripts/doc-snippets: edit the doc, then run it.
// Compiled with the products AppSandbox, as a user's package that depends on them.
import AppSandbox

// What `run --app com.example.memo --grant VAULT=vault.bookmark --on-stale follow` does.
let session = try SandboxSession(environment: SecurityScope.processEnvironment())
let app = try AppID("com.example.memo")
let policy = Policy.defaultPolicy
var request = try session.launchRequest(app: app, policy: policy, command: ["/bin/ls", "-l", "$SANDBOX_GRANT_VAULT"])
let grants = try session.launchGrants(app: app, policy: policy, onStale: .follow) { (asked: PickRequest) in
    nil  // a picker the app does not control: the folder the person chose, opened, or nil (cancelled)
}
let (rule, variable) = try grants.resolve(name: "VAULT", bookmark: "/home/ada/vault.bookmark")
request.folders.append(rule)
request.pathVariables[variable] = rule.path   // SANDBOX_GRANT_VAULT
let status = try ConfinementPlan(request).launch().wait()
