// docs/live-grants.md:139, copied by scripts/doc-snippets: edit the doc, then run it.
// Compiled with the products AppSandbox, as a user's package that depends on them.
import AppSandbox

let session = try SandboxSession(environment: SecurityScope.processEnvironment())
let policy = try session.policy(named: "writer")  // its live-grant keys give the command the broker's socket
var request = try session.launchRequest(app: try AppID("com.example.notes"), policy: policy, command: ["notes-app"])
request.liveGrants = .attach
let grantIDs: [String: GrantID] = [:]            // launch grants' names -> LaunchGrants.resolveGrant's ids
let plan = try ConfinementPlan(request)
session.liveGrantService(app: request.app, policy: policy, picker: AskpassPicker(program: "/usr/local/bin/my-picker"))
    .serve(plan.liveGrants, running: plan.running, launchGrants: grantIDs)
let status = try plan.launch().wait()            // wait() serves the broker and applies revocations
