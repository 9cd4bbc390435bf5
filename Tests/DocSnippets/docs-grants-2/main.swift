// docs/grants.md:183, copied by scripts/doc-snippets: edit the doc, then run it.
// Compiled with the products AppSandbox, as a user's package that depends on them.
import AppSandbox

let environment = SecurityScope.processEnvironment()
let app = try AppID("com.example.memo")
let broker = try GrantBroker(state: StateDirectory(path: StateDirectory.defaultPath(environment: environment)))
var saved = try broker.bookmarkData(forFolder: "/home/ada/Notes", app: app, options: [.withSecurityScope])
var isStale = false
let notes = try broker.url(resolvingBookmarkData: saved, app: app, bookmarkDataIsStale: &isStale)
if isStale { saved = try broker.bookmarkData(renewing: saved, app: app) }  // and write it back
if notes.startAccessingSecurityScopedResource() {
    print(notes.path)
    notes.stopAccessingSecurityScopedResource()
}
