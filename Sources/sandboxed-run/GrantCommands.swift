@preconcurrency import Glibc
import ArgumentParser
import FoundationEssentials
import AppSandbox
import SystemPackage

/// The grant side of the CLI: the session's broker, the terminal picker,
/// `pick`, bookmark files and `run --grant`'s LaunchGrants.
enum Picking {
    static var hasTerminal: Bool {
        guard isatty(0) == 1 else { return false }
        let tty = Glibc.open("/dev/tty", O_RDWR | O_CLOEXEC)
        if tty >= 0 { close(tty) }
        return tty >= 0
    }

    static func launchGrants(
        session: SandboxSession? = nil, app: AppID, policy: Policy, onStale: StaleChoice, onMissing: MissingChoice
    ) throws -> LaunchGrants {
        var grants = try (session ?? SandboxSession.cli()).launchGrants(
            app: app, policy: policy, onStale: onStale, onMissing: onMissing, picker: Picking.terminalPicker)
        grants.notice = { Console.lines("sandboxed-run: " + Hints.message(for: $0)) }
        return grants
    }

    static func open() throws -> GrantBroker {
        try SandboxSession.cli().broker()
    }

    /// The terminal picker, for LaunchGrants: opens where the folder moved,
    /// with the cursor on it, or in the current folder.
    static func terminalPicker(_ request: PickRequest) throws -> OwnedDescriptor? {
        let title = "sandboxed-run: choose a folder for \(request.app), " + FolderBrowser.describe(request.access)
        let origin = request.startingAt ?? FilePath(currentDirectory() ?? Environment.current["HOME"] ?? "/")
        return try FolderPicker.choose(
            title: [Printable.message(title)], access: request.access, startingAt: origin, highlighted: request.highlighted)?.folder
    }

    /// `pick`: the folder the user chose (or `selected`, typed by the user),
    /// granted, its bookmark written to `output` before the grant counts.
    static func pick(app: AppID, access: GrantAccess, selected: FilePath?, output: String) throws -> GrantBroker.Issued {
        StopSignals.unblock()
        let broker = try open()
        let folder: OwnedDescriptor
        if let selected {
            guard !selected.isEmpty else {
                throw SandboxError.usage("--select: give the folder to grant; an empty path would grant the current folder")
            }
            // Typed, not browsed: a link an app planted on the way (a vault's
            // `Daily -> ~/.ssh`) is refused, as everywhere the CLI walks a path.
            let fail = { (problem: String) in SandboxError.usage("--select \(Printable.path(selected)): \(problem)") }
            folder = try SafeWalk.openFolder(
                try absolute(selected, fail), trust: .of(broker, containerBase: try AppOptions.containerBase()), describe: fail)
        } else {
            guard let chosen = try terminalPicker(PickRequest(app: app, access: access, startingAt: nil, highlighted: nil)) else {
                throw GrantError.cancelled
            }
            folder = chosen
        }
        let file = try bookmarkFile(output, broker: broker)
        return try broker.grant(app: app, opened: folder, access: access) { bookmark in
            // Until here a stop signal kills the pick and the grant stays
            // pending (no access). From here it is made live and the pick
            // exits 0: a signal now waits and is dropped at exit, so that a
            // pick never reports "interrupted" for a grant it made.
            try file.replace(with: bookmark)
            StopSignals.block()
        }
    }

    static func currentDirectory() -> String? {
        guard let cwd = getcwd(nil, 0) else { return nil }
        defer { free(cwd) }
        return String(cString: cwd)
    }

    /// The working directory's bytes (a name need not be UTF-8); empty when there is none.
    static func currentDirectoryBytes() -> [UInt8] {
        guard let cwd = getcwd(nil, 0) else { return [] }
        defer { free(cwd) }
        return Array(UnsafeBufferPointer(start: UnsafeRawPointer(cwd).assumingMemoryBound(to: UInt8.self), count: strlen(cwd)))
    }

    /// `path` made absolute from the working directory; a usage error when
    /// there is none to start from (deleted under us), never a silent "/".
    static func absolute(_ path: String) throws(SandboxError) -> String {
        if path.hasPrefix("/") { return path }
        guard let cwd = currentDirectory() else {
            throw .usage("\(path): a relative path, and the working directory cannot be found (\(Errno(rawValue: errno))): give an absolute path")
        }
        return cwd + "/" + path
    }

    /// `path` made absolute from the working directory, as bytes; `fail`
    /// says why when there is no working directory to start from (never a
    /// silent "/" instead).
    static func absolute<Failure: Error>(_ path: FilePath, _ fail: (String) -> Failure) throws(Failure) -> FilePath {
        if path.isAbsolute { return path }
        guard let cwd = getcwd(nil, 0) else {
            throw fail("a relative path, and the working directory cannot be found (\(Errno(rawValue: errno))): give an absolute path")
        }
        defer { free(cwd) }
        return FilePath(platformString: cwd).pushing(path)
    }

    /// A bookmark file: nothing an app (or another user) could have planted along its path is followed.
    static func bookmarkFile(_ path: String, broker: GrantBroker) throws -> BookmarkFile {
        try SandboxSession.cli().bookmarkFile(absolute(path), broker: broker)
    }
}

/// The signals that ask a pick to stop: Ctrl-C, `kill`, a closed terminal.
enum StopSignals {
    static var set: sigset_t {
        var signals = sigset_t()
        sigemptyset(&signals)
        for signal in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&signals, signal) }
        return signals
    }

    /// Honoured from now on, however the pick was started: Foundation's
    /// Process (and some supervisors) start children with them blocked, and
    /// a pick that never sees Ctrl-C grants anyway. Ignored ones stay
    /// ignored, as `nohup` asked.
    static func unblock() {
        var signals = set
        pthread_sigmask(SIG_UNBLOCK, &signals, nil)
    }

    /// Held from now on (pending, dropped if the process exits first).
    static func block() {
        var signals = set
        pthread_sigmask(SIG_BLOCK, &signals, nil)
    }
}

struct Pick: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pick",
        abstract: "Let the user choose a folder for an app; write the app's bookmark.",
        discussion: """
            Asks on the terminal (/dev/tty), which the app cannot drive, in a folder browser: Space or \
            Enter choose the highlighted folder, → opens it, ← goes up, c chooses the folder listed (a \
            read-write grant of it asks for y first when a folder in it is highlighted), . shows hidden \
            folders, q, Esc or Ctrl-C cancel (exit 1). The footer shows the path each key grants. \
            --select PATH chooses without asking, for scripts and tests. The bookmark is opaque and sealed: store it anywhere and \
            pass it to `run --grant NAME=FILE`.
            """
    )
    @OptionGroup var app: AppOptions
    @Flag(help: "Grant read-only access.") var readOnly = false
    @Option(name: .shortAndLong, help: "Where to write the bookmark (replaced atomically).") var output: String
    @Option(help: "Choose this folder without asking.") var select: String?

    func run() throws {
        // The folder's name is taken as the bytes given, which need not be UTF-8.
        let selected = select.map { RawArguments.value(of: "--select") ?? FilePath($0) }
        let issued = try Picking.pick(app: try app.appID(), access: readOnly ? .readOnly : .readWrite, selected: selected, output: output)
        Console.lines("granted \(app.app) \(issued.access.rawValue) access to \(issued.path) (grant \(issued.id))")
    }
}

struct Resolve: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resolve",
        abstract: "Resolve a bookmark: fresh, moved, replaced, missing, revoked, wrong-app, invalid, covered or inaccessible.",
        discussion: """
            Exit codes: 0 fresh, 10 moved (stale), 11 replaced, 12 missing, 13 revoked, 14 wrong-app, 15 invalid, \
            16 covered (a mount hides the folder), 17 inaccessible (a folder on the path may not be searched, or the folder lies beyond PATH_MAX), 125 usage. \
            --follow rewrites only a stale bookmark (moved, or sealed with an older key) whose folder may be granted where it is now.
            """
    )
    @OptionGroup var app: AppOptions
    @Flag(help: "Print JSON.") var json = false
    @Flag(help: "If the folder moved, accept it: rewrite the bookmark with its new place.") var follow = false
    @Argument(help: "The bookmark file.") var file: String

    func run() throws {
        let broker = try Picking.open()
        let appID = try app.appID()
        let bookmark = try Picking.bookmarkFile(file, broker: broker)
        guard let blob = try bookmark.read() else {
            throw GrantError.bookmarkFile(path: file, problem: "does not exist: make one with `sandboxed-run pick`")
        }
        let resolution = try broker.resolve(blob, app: appID)
        var renewed = false
        if follow, resolution.isStale, resolution.status == .fresh || resolution.status == .moved {
            try bookmark.replace(with: try broker.renew(resolution, app: appID))
            renewed = true
        }
        if json {
            print(JSON.encode(ResolveReport(
                status: resolution.status.rawValue, message: resolution.message, isStale: resolution.isStale,
                renewed: renewed, originalPath: resolution.originalPath.map(JSONPath.init), path: resolution.currentPath.map(JSONPath.init),
                grant: resolution.grant?.id.hex, access: resolution.access?.rawValue, method: resolution.method?.description)))
        } else {
            print(Printable.message("\(resolution.status.rawValue): \(resolution.message)" + (renewed ? " (bookmark rewritten)" : "")))
        }
        throw ExitCode(renewed ? 0 : resolution.status.exitCode)
    }
}

/// `resolve --json`: one object, absent fields omitted.
struct ResolveReport: Encodable {
    let status: String
    let message: String
    let isStale: Bool
    let renewed: Bool
    let originalPath: JSONPath?
    let path: JSONPath?
    let grant: String?
    let access: String?
    let method: String?
}

/// `grants list --json`: one object per grant.
struct GrantReport: Encodable {
    let id: String
    let app: String
    let access: String
    let path: JSONPath
    let created: Int64
    let revoked: Int64?
    /// live, revoked, or pending (a pick that did not complete: no access).
    let state: String
}

struct GrantsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "grants",
        abstract: "List and revoke grants; list the running sandboxes that hold them; rotate the broker's key.",
        subcommands: [List.self, Revoke.self, Holders.self, RotateKey.self]
    )

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "Show who can reach what.")
        @Option(help: "Only this app's grants.") var app: String?
        @Flag(help: "Print JSON.") var json = false

        func run() throws {
            let broker = try Picking.open()
            let records = try broker.list(app: try app.map { try AppID($0) })
            let held = try broker.heldRevocations()
            if held > 0 {
                Console.notice("\(held) revocation\(held == 1 ? " is" : "s are") held in the revocation reserve, not yet in the ledger "
                    + "(it could not be written: a full disk). They are in force and shown here; the next command that writes the ledger "
                    + "(once there is room) writes them into it.")
            }
            if json {
                print(JSON.encode(records.map {
                    GrantReport(id: $0.id.hex, app: $0.app, access: $0.access.rawValue, path: JSONPath($0.path),
                                created: $0.created, revoked: $0.revoked,
                                state: $0.revoked != nil ? "revoked" : $0.pending != nil ? "pending" : "live")
                }))
                return
            }
            if records.isEmpty { print("no grants"); return }
            for record in records {
                print(Printable.message("\(record.id)  \(record.app)  \(record.access.rawValue)  \(record.path)"
                    + (record.revoked != nil ? "  (revoked)" : record.pending != nil ? "  (pick did not complete: no access)" : "")))
            }
        }
    }

    struct Revoke: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "revoke",
            abstract: "Revoke grants by id, app or folder; say which running sandboxes still hold them, and offer to end those.",
            discussion: """
                The revocation is recorded first: no launch after it gets the folder. It goes into space set aside \
                ahead of time in the state folder (the revocation reserve), then into the ledger; when the disk is full \
                and the ledger cannot be written, the reserve alone holds it, in force, until a later command that \
                writes the ledger takes it in (revoke says so, and exits as below). Then running sandboxes that hold a \
                revoked grant are named. In the private view a folder attached while running, or given at launch with \
                a mount of its own, is detached by its launcher: revoke waits up to \(Int(Holding.detachWait)) s for \
                that and says it was cut; a sandbox that still holds that folder (a descriptor or working directory in it, \
                a file open or mapped there) is ended by its launcher instead, never left with the folder detached under \
                what it holds, and revoke says so. A folder given at launch in the host view (a Landlock rule, which cannot be \
                taken back from a running command), or in the private view one that shares a mount that stays (inside \
                the container, inside another grant with the same access, or at a path the policy names), stays \
                reachable until the sandbox ends (`grants holders` says which is which): those sandboxes are listed, \
                and with --end-holders, or when you answer y on a terminal, their launchers get SIGTERM (SIGKILL after \(Int(Holding.grace)) s), identified by pid and \
                start time so that no process that reused a pid is signalled. Nothing is ended otherwise. \
                Exit codes: 0 revoked, and no running sandbox still holds a revoked folder; 3 revoked, but a running \
                sandbox listed still holds one (not ended, could not be ended, or recorded in another pid namespace); \
                125 anything else (nothing was revoked unless "revoked" was printed; with --end-holders, the holders \
                of what could not be revoked are still ended).
                """)
        @Option(help: "A grant id (or a unique prefix), as `grants list` shows.") var grant: String?
        @Option(help: "Every grant of this app.") var app: String?
        @Option(help: "Every grant of this folder, for every app.") var folder: String?
        @Flag(help: "End the running sandboxes that still hold a revoked folder, without asking.") var endHolders = false
        @Flag(help: "Neither end nor ask about running sandboxes that still hold a revoked folder.") var keepHolders = false

        func run() throws {
            guard !(endHolders && keepHolders) else { throw ValidationError("give at most one of --end-holders and --keep-holders") }
            let broker = try Picking.open()
            let selection: GrantBroker.Revocation
            switch (grant, app, folder) {
            case (let grant?, nil, nil): selection = .grant(grant)
            case (nil, let app?, nil): selection = .app(try AppID(app))
            case (nil, nil, let folder?): selection = .folder(try Picking.absolute(folder))
            default: throw ValidationError("give exactly one of --grant, --app or --folder")
            }
            // Who holds what before the revocation: a launcher may cut its
            // folder before the report first looks (at once, when the disk
            // is full and the ledger write fails slowly). Best effort: a
            // record that cannot be read fails the report below, not the revocation.
            let early = try? SandboxSession.cli().runningSandboxes()
            let before = try? early?.survey(prune: false)
            let outcome: GrantBroker.RevocationOutcome
            do {
                outcome = try broker.revoke(selection)
            } catch {
                // Unrecorded, no launcher learns of it and nothing is cut: what
                // --end-holders asks is done all the same (then the error, 125).
                if endHolders, case .revocationNotRecorded(_, _, let named) = error {
                    _ = try RevokeReport(running: try early ?? SandboxSession.cli().runningSandboxes(), named: named).endEveryHolder()
                }
                throw error
            }
            let count = outcome.revoked
            print("revoked \(count) grant\(count == 1 ? "" : "s")")
            if let problem = outcome.notInLedger {
                fflush(stdout)  // said after the count it explains
                let them = outcome.held == 1 ? "it" : "them"
                Console.error("the ledger could not be written (\(problem)). The revocation is held instead in \(outcome.reservePath), "
                    + "space set aside when the state was made, so holding it needed no new space; it is synced and in force: the grants "
                    + "resolve as revoked from now on, and running sandboxes are cut or listed as below. \(outcome.held) revocation"
                    + (outcome.held == 1 ? " waits" : "s wait") + " there for the ledger: free space on the filesystem of \(broker.state.path), "
                    + "then run this command again (or any that writes the ledger) to write \(them) into it.")
            }
            let report = RevokeReport(running: try early ?? SandboxSession.cli().runningSandboxes(), named: outcome.named)
            guard try report.run(end: endHolders ? true : keepHolders ? false : nil, before: before) else { throw ExitCode(3) }
        }
    }

    struct RotateKey: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate-key",
            abstract: "Seal new bookmarks with a new key.",
            discussion: "Old bookmarks still resolve (as stale, to be re-saved) until --retire-old deletes the old keys; then they are invalid.")
        @Flag(help: "Delete every key but the current one.") var retireOld = false

        func run() throws {
            let broker = try Picking.open()
            if retireOld {
                print("retired \(try broker.retireOldKeys()) old key(s)")
            } else {
                try broker.rotateKey()
                print("rotated: new bookmarks use a new key")
            }
        }
    }
}

/// A path in JSON: its text, exact when the path is UTF-8. A path that is
/// not is given as text (invalid bytes shown as U+FFFD) and as hex bytes,
/// `{"text": ..., "hex": ...}`, so that nothing is lost.
struct JSONPath: Encodable {
    let path: FilePath
    init(_ path: FilePath) { self.path = path }

    func encode(to encoder: any Encoder) throws {
        if let text = path.exactString {
            var container = encoder.singleValueContainer()
            try container.encode(text)
        } else {
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(String(decoding: path.bytes, as: UTF8.self), forKey: .text)
            try container.encode(Printable.hex(path.bytes), forKey: .hex)
        }
    }

    enum Keys: String, CodingKey { case text, hex }
}

/// JSON output, keys sorted so it is stable.
enum JSON {
    static func encode(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "null"
    }
}

extension StaleChoice: ExpressibleByArgument {}
extension MissingChoice: ExpressibleByArgument {}
extension FileSystemView: ExpressibleByArgument {}
