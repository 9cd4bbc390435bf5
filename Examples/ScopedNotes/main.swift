// scoped-notes: an app written against the Apple-like API only. The same
// code runs unconfined (the local ledger, a picker it is given) and under
// `sandboxed-run run` (the launcher's broker and picker):
//
//   scoped-notes pick [--picker PROGRAM]   ask for a folder, keep its bookmark, leave a note in it
//   scoped-notes open                      a later run: reach the folder again through the bookmark
//
// The bookmark is kept in $HOME, which inside a sandbox is the app's container.
@preconcurrency import Glibc
import AppSandbox

let bookmarkPath = (getenv("HOME").map { String(cString: $0) } ?? "/nonexistent") + "/notes.bookmark"

func say(_ line: String) {
    print(line)
    fflush(stdout)
}

func fail(_ error: SecurityScopeError) -> Never {
    fputs("scoped-notes: \(error)\n", stderr)
    exit(error == .cancelled ? 1 : 2)
}

/// A file's first line, nil when it cannot be read.
func firstLine(_ path: String) -> String? {
    guard let file = fopen(path, "r") else { return nil }
    defer { fclose(file) }
    var buffer = [UInt8](repeating: 0, count: 256)
    let got = fread(&buffer, 1, buffer.count, file)
    return String(decoding: buffer[..<got].prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self)
}

func write(_ text: String, to path: String) -> Bool {
    guard let file = fopen(path, "w") else { return false }
    let written = fputs(text, file) >= 0
    return fclose(file) == 0 && written
}

let arguments = Array(CommandLine.arguments.dropFirst())
let picker = arguments.firstIndex(of: "--picker").flatMap { $0 + 1 < arguments.count ? AskpassPicker(program: arguments[$0 + 1]) : nil }
let app = try! AppID("com.example.scoped-notes")

do {
    let scope = try SecurityScope.current(app: app, picker: picker)
    switch arguments.first {
    case "pick":
        // As NSOpenPanel: the person chooses; the URL carries its bookmark.
        let panel = OpenPanel(scope: scope)
        panel.message = "Where should scoped-notes keep its notes?"
        panel.createsBookmark = true
        guard let url = try panel.runModal() else { throw SecurityScopeError.cancelled }
        try scope.writeBookmarkData(try url.bookmarkData(), to: bookmarkPath)
        say("picked: \(firstLine(url.path.string + "/note.txt") ?? "(no note)")")
        say(write("kept by scoped-notes\n", to: url.path.string + "/from-scoped-notes.txt") ? "wrote a note" : "could not write")
    case "open":
        var data = try scope.bookmarkData(withContentsOf: bookmarkPath)
        var isStale = false
        let url = try scope.url(resolvingBookmarkData: data, bookmarkDataIsStale: &isStale)
        if isStale {
            // As Apple advises: save the renewed bookmark in place of the old.
            data = try url.bookmarkData()
            try scope.writeBookmarkData(data, to: bookmarkPath)
            say("the folder moved: bookmark renewed")
        }
        guard url.startAccessingSecurityScopedResource() else { fail(url.lastError ?? .cancelled) }
        say("reached: \(firstLine(url.path.string + "/note.txt") ?? "(unreachable)")")
        say("outstanding: \(url.outstandingAccesses)")
        let reached = url.path.string
        url.stopAccessingSecurityScopedResource()
        say("stopped, outstanding: \(url.outstandingAccesses)")
        say("after stop: \(firstLine(reached + "/note.txt") == nil ? "unreachable" : "reachable")")
    default:
        fputs("usage: scoped-notes pick [--picker PROGRAM] | open\n", stderr)
        exit(64)
    }
} catch let error as SecurityScopeError {
    fail(error)
} catch {
    fputs("scoped-notes: \(error)\n", stderr)
    exit(2)
}
