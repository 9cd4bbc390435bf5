// docs/live-grants.md:161, copied by scripts/doc-snippets: edit the doc, then run it.
// Compiled with the products AppSandbox, as a user's package that depends on them.
import AppSandbox

let home = SecurityScope.processEnvironment()["HOME"] ?? "."   // the app's container, inside a sandbox
let scope = try SecurityScope.current(app: try AppID("com.example.notes"), picker: AskpassPicker(program: "/usr/local/bin/my-picker"))
let panel = OpenPanel(scope: scope)            // as NSOpenPanel choosing one folder
panel.message = "Where are your notes?"; panel.createsBookmark = true
if let url = try panel.runModal() { try scope.writeBookmarkData(try url.bookmarkData(), to: home + "/notes.bookmark") }
// a later run:
var isStale = false
let url = try scope.url(resolvingBookmarkData: try scope.bookmarkData(withContentsOf: home + "/notes.bookmark"), bookmarkDataIsStale: &isStale)
if isStale { try scope.writeBookmarkData(try url.bookmarkData(), to: home + "/notes.bookmark") }
guard url.startAccessingSecurityScopedResource() else { throw url.lastError! }
defer { url.stopAccessingSecurityScopedResource() }
// use url.path
