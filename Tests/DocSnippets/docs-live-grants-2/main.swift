// docs/live-grants.md:208, copied by scripts/doc-snippets: edit the doc, then run it.
// Compiled with the products AppSandbox, as a user's package that depends on them.
import AppSandbox

let session = try SandboxSession(environment: SecurityScope.processEnvironment())
let app = try AppID("com.example.notes")
let request = try session.launchRequest(app: app, policy: .defaultPolicy, command: ["/bin/ls", "-l"])
let launchGrants = try session.launchGrants(app: app, policy: .defaultPolicy)
let vault = try launchGrants.grant(name: "VAULT", bookmark: "/home/ada/vault.bookmark")  // $SANDBOX_GRANT_VAULT
let sandbox = try session.launch(request, grants: [vault], picker: AskpassPicker(program: "/usr/local/bin/my-picker"),
                                 broker: launchGrants.broker)
let status = try sandbox.wait()                 // serves the broker and applies revocations
print(status)
