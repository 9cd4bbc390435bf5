import Foundation
import Testing

/// Folders deeper than PATH_MAX in a scratch home, made one name at a time
/// (mkdirat from the folder above), as `mkdir` of relative steps makes them:
/// the kernel holds such folders but takes no path that long. Owns the home,
/// so that the tree goes first: `rm -r` walks by descriptors, while
/// Foundation's removal stops at PATH_MAX.
final class DeepFolders {
    static let name = String(repeating: "d", count: 200)
    /// 21 × 201 bytes: beyond PATH_MAX (4096) below any scratch folder.
    static let levels = 21
    let home = CLI.Home()
    var base: String { home.path + "/deep" }

    init() throws {
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        for level in 0..<Self.levels {
            try at(level) { folder in try #require(mkdirat(folder, Self.name, 0o755) == 0, "mkdirat: \(errno)") }
        }
    }

    deinit { _ = try? CLI.program("/bin/rm", ["-rf", base]) }

    /// The absolute path of the folder `levels` names below `base`.
    func path(_ levels: Int = DeepFolders.levels) -> String { base + String(repeating: "/" + Self.name, count: levels) }

    /// `body` with a descriptor of the folder `levels` names below `base`, opened one name at a time.
    func at<T>(_ levels: Int, _ body: (CInt) throws -> T) throws -> T {
        var folder = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        try #require(folder >= 0)
        for _ in 0..<levels {
            let next = openat(folder, Self.name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            close(folder)
            try #require(next >= 0, "openat: \(errno)")
            folder = next
        }
        defer { close(folder) }
        return try body(folder)
    }

    /// A link with a short path that leads beyond PATH_MAX (its target is
    /// relative): a path typed or printed is short, the folder it names need not be.
    func shortcut() throws -> String {
        let half = 10
        let target = Array(repeating: Self.name, count: Self.levels - half).joined(separator: "/")
        try at(half) { folder in try #require(symlinkat(target, folder, "jump") == 0, "symlinkat: \(errno)") }
        return path(half) + "/jump"
    }
}

/// A folder whose path is longer than PATH_MAX can be walked to one name at a
/// time, but the kernel cannot name it: every command that takes a folder
/// says so (ENAMETOOLONG, naming the limit), never "not a folder" or "missing".
@Suite struct LongPathCLITests {
    let deep: DeepFolders
    var home: CLI.Home { deep.home }
    static let app = "com.example.memo"
    static let limit = "longer than the kernel's limit of 4096 bytes (PATH_MAX; ENAMETOOLONG, File name too long)"

    init() throws { deep = try DeepFolders() }

    @Test func pickSelectSaysThePathIsTooLong() throws {
        for selected in [deep.path(), try deep.shortcut()] {
            let result = try CLI.run(["pick", "--app", Self.app, "--select", selected, "-o", home.path + "/deep.bookmark"], home: home)
            #expect(result.status == 125, "\(result)")
            #expect(result.stderr.contains("cannot grant the chosen folder: its path is \(Self.limit)"), "\(result.stderr)")
            #expect(!result.stderr.contains("not a folder"), "\(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: home.path + "/deep.bookmark"))
        #expect(try CLI.run(["grants", "list"], home: home).stdout == "no grants\n")
    }

    @Test func chdirAndTheDenialsLogSayThePathIsTooLong() throws {
        let chdir = try CLI.run(["run", "--app", Self.app, "--chdir", deep.path(), "--", "/bin/true"], home: home)
        #expect(chdir.status == 125, "\(chdir)")
        #expect(chdir.stderr.hasPrefix("sandboxed-run: --chdir the working directory \(home.path)/deep/ddd"), "\(chdir.stderr)")
        #expect(chdir.stderr.contains("(\(deep.path().utf8.count) bytes): its path is \(Self.limit)"), "\(chdir.stderr)")
        #expect(chdir.stderr.utf8.count < 1000, "the path is shortened: \(chdir.stderr)")
        let log = try CLI.run(["run", "--app", Self.app, "--denials", deep.path() + "/denials.jsonl", "--", "/bin/true"], home: home)
        #expect(log.status == 125, "\(log)")
        #expect(log.stderr.contains("--denials: its path is \(Self.limit)"), "\(log.stderr)")
    }

    /// A granted folder moved beyond PATH_MAX is found (by file handle as
    /// root, by the bounded search as uid 65534, descending by descriptors
    /// past the limit) and said to be out of reach: not "missing".
    @Test(arguments: [nil, 65534] as [uid_t?]) func aGrantedFolderMovedTooDeepIsSaidToBeOutOfReach(as user: uid_t?) throws {
        if user != nil { try #require(getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv"), "needs root and setpriv") }
        let vault = home.path + "/Vault"
        let bookmark = home.path + "/vault.bookmark"
        try FileManager.default.createDirectory(atPath: vault, withIntermediateDirectories: true)
        if user != nil { #expect(try CLI.program("/bin/chown", ["-R", "65534:65534", home.path]).status == 0) }
        func sandboxedRun(_ arguments: [String]) throws -> CLI.Result {
            guard user != nil else { return try CLI.run(arguments, home: home) }
            return try CLI.program("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", CLI.binary] + arguments,
                                   environment: home.environment)
        }
        #expect(try sandboxedRun(["pick", "--app", Self.app, "--select", vault, "-o", bookmark]).status == 0)
        try deep.at(DeepFolders.levels) { folder in try #require(renameat(AT_FDCWD, vault, folder, "Vault") == 0, "renameat: \(errno)") }
        let resolved = try sandboxedRun(["resolve", "--app", Self.app, bookmark])
        #expect(resolved.status == 17, "\(resolved)")
        let said = resolved.stdout + resolved.stderr
        #expect(said.contains("inaccessible: \(vault) moved where it cannot be reached: the folder is still there (found by "), "\(said)")
        #expect(said.contains(user == nil ? "open_by_handle_at" : "a search of"), "\(said)")
        #expect(said.contains("its path is \(Self.limit)"), "\(said)")
        let run = try sandboxedRun(["run", "--app", Self.app, "--grant", "VAULT=\(bookmark)", "--on-stale", "follow", "--", "/bin/true"])
        #expect(run.status == 125, "\(run)")
        #expect(run.stderr.contains("inaccessible: \(vault) moved where it cannot be reached"), "\(run.stderr)")
        #expect(run.stderr.contains("its path is \(Self.limit)"), "\(run.stderr)")
    }

    /// The open panel's browser: a short link leading beyond PATH_MAX is
    /// highlighted; it cannot be chosen, the browser says why with the same
    /// sentence, and nothing is granted.
    @Test func aLinkBeyondPathMaxCannotBeChosenInTheOpenPanel() throws {
        _ = try deep.shortcut()
        let terminal = try PersonAtTerminal()
        let script = "\"$SANDBOXED_RUN\" open-panel; echo \"status $?\""
        // The link's folder holds the next level (d…d) and jump, in that order.
        let process = try terminal.start(["run", "--app", Self.app, "--", "/bin/sh", "-c", script], home: home, in: deep.path(10))
        #expect(terminal.waitFor(LiveGrantsTerminalTests.question), "\(terminal.output)")
        terminal.type("\u{1B}[B")
        #expect(terminal.waitFor(LiveGrantsTerminalTests.question, times: 2), "\(terminal.output)")
        terminal.type(" ")
        #expect(terminal.waitFor("jump cannot be chosen"), "\(terminal.output)")
        terminal.type("q")
        let status = terminal.finish(process)
        let shown = terminal.output
        #expect(status == 0, "\(shown)")
        #expect(shown.contains("jump cannot be chosen: the kernel gives no path for it (it was deleted, or its path is \(Self.limit)"), "\(shown)")
        #expect(shown.contains("status 1"), "\(shown)")
        #expect(try CLI.run(["grants", "list"], home: home).stdout == "no grants\n")
    }
}
