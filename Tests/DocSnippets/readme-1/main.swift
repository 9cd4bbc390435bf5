// README.md:184, copied by scripts/doc-snippets: edit the doc, then run it.
// Compiled with the products AppSandbox, as a user's package that depends on them.
import AppSandbox

let session = try SandboxSession(environment: ["HOME": "/home/ada", "LANG": "C.UTF-8"])
var request = try session.launchRequest(app: try AppID("com.example.memo"), policy: .defaultPolicy,
                                        command: ["/bin/sh", "-c", "date >> Documents/log"])
request.compatibility = .hardRequirement          // or .bestEffort
let plan = try ConfinementPlan(request)           // everything built here, in the parent
print(plan.report.text)                           // what is enforced
let status = try plan.launch().wait()             // .exited(0); wait() also serves the supervisor
