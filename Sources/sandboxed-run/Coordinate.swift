@preconcurrency import Glibc
import ArgumentParser
import Coordination
import Grants
import Sandbox
import SystemPackage

/// Exit codes of `append` and `coordinate` (sysexits.h): what a script can act on.
enum CoordinationExit {
    static let notOneLine: Int32 = 65  // EX_DATAERR: fix the record
    static let ioError: Int32 = 74     // EX_IOERR: nothing was written
    static let tryLater: Int32 = 75    // EX_TEMPFAIL: locked too long, or not downloaded yet
    static let refused: Int32 = 125    // not a regular file, a link, a damaged journal

    static func code(for error: CoordinationError) -> Int32 {
        switch error {
        case .notOneLine: notOneLine
        case .timedOut, .placeholder: tryLater
        case .system: ioError
        case .notARegularFile, .link, .damagedJournal, .damagedPlaceholder, .noSuchVersion, .unsafePath, .interfered: refused
        }
    }

    /// Runs `body`, turning a coordination failure into one line and its exit code.
    static func run(_ body: () throws -> Void) throws {
        do {
            try body()
        } catch let error as CoordinationError {
            Console.error(error.description)
            throw ExitCode(code(for: error))
        }
    }
}

struct Append: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "append",
        abstract: "Append TEXT to FILE as one whole line, coordinated with every other writer (merging intent).",
        discussion: """
            Waits for readers and writers that follow the coordination protocol (a sync daemon, \
            another append), never joins the line to another, and exits 0 only when the line is in \
            the file. Exit codes: 65 TEXT is not one line; 74 an I/O error (nothing written); \
            75 try later (locked longer than --timeout, or FILE is only a placeholder); \
            125 FILE is not a regular file, is a link, or has a damaged journal. \
            Inside the sandbox the launcher's own binary is $SANDBOXED_RUN.
            """
    )

    @Argument(help: "The file (created if missing; its folder must exist).")
    var file: String

    @Argument(help: "The line to append, without a newline.")
    var text: String

    @Option(help: "Seconds to wait for other parties (default 30).")
    var timeout: Double = 30

    @Option(help: "When FILE is only a placeholder, ask the sync daemon for it and wait this many seconds (default: refuse at once).")
    var download: Double?

    func run() throws {
        let coordinator = FileCoordinator(timeout: .milliseconds(Int64(max(0, timeout) * 1000)))
        try CoordinationExit.run {
            let location = try UnconfinedPath.file(file)
            if let download { try Placeholder.download(location, timeout: .milliseconds(Int64(max(0, download) * 1000))) }
            try coordinator.append(line: Array(text.utf8), to: location)
        }
    }
}

struct Coordinate: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "coordinate",
        abstract: "Run a command while holding FILE's coordination, as NSFileCoordinator would.",
        discussion: """
            --read FILE: no coordinated writer changes FILE while COMMAND runs. \
            --write FILE: no other coordinated party uses FILE; with --intent replacing, COMMAND \
            writes the temporary file named by $COORDINATED_PATH, which replaces FILE when COMMAND \
            exits 0 (and is discarded otherwise). COMMAND finds the path to use in $COORDINATED_PATH: \
            it goes through a descriptor COMMAND inherits (/proc/self/fd/N), not through FILE's name, \
            which another process could swap for a link meanwhile. \
            Exits with COMMAND's status, or as `append` does when coordination fails.
            """
    )

    enum Intent: String, ExpressibleByArgument, CaseIterable { case merging, replacing, deleting, moving }

    @Option(help: "Coordinate reading FILE.")
    var read: String?

    @Option(help: "Coordinate writing FILE.")
    var write: String?

    @Option(help: "The writing intent.")
    var intent: Intent = .merging

    @Option(help: "Seconds to wait for other parties (default 30).")
    var timeout: Double = 30

    @Argument(parsing: .postTerminator, help: "The command, after --.")
    var command: [String] = []

    func validate() throws {
        guard (read == nil) != (write == nil) else { throw ValidationError("give exactly one of --read FILE and --write FILE") }
        guard !command.isEmpty else { throw ValidationError("no command given: put it after --") }
    }

    func run() throws {
        let coordinator = FileCoordinator(timeout: .milliseconds(Int64(max(0, timeout) * 1000)))
        var status: Int32 = 0
        try CoordinationExit.run {
            if let read {
                try coordinator.coordinate(reading: try UnconfinedPath.file(read)) { item in
                    guard item.descriptor != nil else {
                        throw CoordinationError.system(operation: "reading", path: FilePath(read), errno: .noSuchFileOrDirectory)
                    }
                    status = try spawn(item)
                }
            } else if let write {
                let intent: FileCoordinator.WritingIntent = switch intent {
                case .merging: .forMerging
                case .replacing: .forReplacing
                case .deleting: .forDeleting
                case .moving: .forMoving
                }
                try coordinator.coordinate(writing: try UnconfinedPath.file(write), options: intent) { item in
                    status = try spawn(item)
                    if intent == .forReplacing, status != 0 { throw ExitCode(status) }  // the temporary file is discarded
                }
            }
        }
        throw ExitCode(status)
    }

    /// COMMAND with COORDINATED_PATH set; its wait status as a shell reports it.
    /// The path goes through a copy of the coordinator's descriptor that
    /// COMMAND inherits, so an app that swaps a name for a link meanwhile
    /// cannot send COMMAND outside its folder.
    private func spawn(_ item: FileCoordinator.Item) throws -> Int32 {
        let inherited = dup(item.anchor)  // without FD_CLOEXEC
        guard inherited >= 0 else { throw CoordinationError.system(operation: "dup", path: item.path, errno: Errno(rawValue: errno)) }
        defer { close(inherited) }
        let path = item.path(through: inherited)
        var environment = ProcessEnvironment.current.filter { !$0.hasPrefix("COORDINATED_PATH=") }
        environment.append("COORDINATED_PATH=" + (path.exactString ?? path.string))
        let argv = command.map { strdup($0) } + [nil]
        let envp = environment.map { strdup($0) } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let error = posix_spawnp(&pid, command[0], nil, nil, argv, envp)
        guard error == 0 else {
            Console.error("\(Printable.message(command[0])): \(Errno(rawValue: error))")
            return error == ENOENT ? 127 : 126
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }
}

enum ProcessEnvironment {
    static var current: [String] {
        var list: [String] = []
        var entry = environ
        while let pointer = entry.pointee {
            list.append(String(cString: pointer))
            entry += 1
        }
        return list
    }
}

struct SyncSimulatorCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync-simulator",
        abstract: "Act as a sync daemon on FOLDER: uploads, remote edits, evictions to placeholders, conflicts.",
        discussion: """
            It follows the coordination protocol (see `append`), or ignores it with --naive to show \
            what goes wrong. Rates are per second; 0 turns a behaviour off. It runs until --seconds \
            pass or it gets SIGINT or SIGTERM, then brings every file it evicted back (unless \
            --leave-placeholders) and prints its counts. A writer inside a sandbox asks for an evicted file by creating \
            .NAME.icloud.download beside its placeholder.
            """
    )

    @Argument(help: "The folder to act on.")
    var folder: String

    @Option(help: "Stop after this many seconds (default: until SIGINT or SIGTERM).")
    var seconds: Double?

    @Option(help: "The random seed: the same seed makes the same run.")
    var seed: UInt64 = 1

    @Option(help: "Remote edits (whole files rewritten) per second.")
    var editRate: Double = 1

    @Option(help: "Evictions to placeholders, and materialisations, per second.")
    var evictRate: Double = 0

    @Option(help: "Concurrent changes that end in a conflict version, per second.")
    var conflictRate: Double = 0

    @Flag(help: "Ignore the coordination protocol (to show the failure).")
    var naive = false

    @Flag(help: "At the end, leave evicted files as placeholders (default: bring them back).")
    var leavePlaceholders = false

    func validate() throws {
        for (name, rate) in [("--edit-rate", editRate), ("--evict-rate", evictRate), ("--conflict-rate", conflictRate)] where !(rate >= 0 && rate <= 1000) {
            throw ValidationError("\(name) must be between 0 and 1000 per second")
        }
        if let seconds, !(seconds >= 0) { throw ValidationError("--seconds must not be negative") }
    }

    func run() throws {
        var options = SyncSimulator.Options()
        options.seed = seed
        options.editRate = editRate
        options.evictRate = evictRate
        options.conflictRate = conflictRate
        options.naive = naive
        options.restoreOnStop = !leavePlaceholders
        // SIGINT and SIGTERM are held and looked for between ticks: a clean stop, never mid-write.
        var stopping = sigset_t()
        sigemptyset(&stopping)
        sigaddset(&stopping, SIGINT)
        sigaddset(&stopping, SIGTERM)
        pthread_sigmask(SIG_BLOCK, &stopping, nil)
        let deadline = seconds.map { ContinuousClock.now + .milliseconds(Int64($0 * 1000)) }
        var counts = SyncSimulator.Counts()
        try CoordinationExit.run {
            let simulator = SyncSimulator(folder: FilePath(folder), descriptor: try UnconfinedPath.folder(folder), options: options)
            counts = try simulator.run {
                var pending = sigset_t()
                sigpending(&pending)
                if sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1 { return true }
                return deadline.map { ContinuousClock.now >= $0 } ?? false
            }
        }
        print("uploads \(counts.uploads), edits \(counts.edits), evictions \(counts.evictions), "
            + "materialisations \(counts.materialisations), conflicts \(counts.conflicts), skipped \(counts.skipped)")
    }
}

struct Versions: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "versions",
        abstract: "List, show and resolve a file's conflict versions (as NSFileVersion).",
        discussion: """
            list FILE: one line per version (identifier, time, side). show FILE ID: its contents. \
            resolve FILE [--keep current|newest|ID]: keep one (default newest: last writer wins by \
            modification time), remove the others.
            """
    )

    enum Action: String, ExpressibleByArgument, CaseIterable { case list, show, resolve }

    @Argument(help: "list, show or resolve.")
    var action: Action

    @Argument(help: "The file.")
    var file: String

    @Argument(help: "The version's identifier (for show).")
    var identifier: String?

    @Option(help: "What resolve keeps: current, newest, or a version's identifier.")
    var keep: String = "newest"

    func run() throws {
        try CoordinationExit.run {
            let path = try UnconfinedPath.file(file)
            switch action {
            case .list:
                for version in try FileVersion.unresolvedConflictVersions(of: path) {
                    print("\(Printable.message(version.identifier))\t\(version.modified.tv_sec)\t\(Printable.message(version.savingComputer))")
                }
            case .show:
                guard let identifier else { throw ValidationError("show needs a version's identifier: see `versions list`") }
                guard let version = try FileVersion.unresolvedConflictVersions(of: path).first(where: { $0.identifier == identifier }) else {
                    throw CoordinationError.noSuchVersion(path.path, identifier)
                }
                let bytes = try version.contents(at: path)
                _ = bytes.withUnsafeBytes { Glibc.write(1, $0.baseAddress, $0.count) }
            case .resolve:
                let choice: FileVersion.Choice = switch keep {
                case "current": .current
                case "newest": .newest
                default: .version(keep)
                }
                switch try FileVersion.resolve(path, keeping: choice) {
                case .current, .newest: print("kept the current file")
                case .version(let kept): print("kept version \(Printable.message(kept))")
                }
            }
        }
    }
}

/// Paths these commands take from the user, walked with the library's one
/// rule for unconfined paths (`LinkTrust.ofState`): a symbolic link that
/// any app could have planted, now or once (in a container, in a folder
/// ever granted read-write, live, revoked or moved, in a policy's read-write
/// folder), or that another user could have planted, is refused.
enum UnconfinedPath {
    static func trust() -> LinkTrust {
        let environment = Environment.current
        guard let state = try? StateDirectory.defaultPath(environment: environment),
              let base = try? AppContainer.defaultBase(environment: environment) else {
            return LinkTrust {
                LinkTrust.Facts(unknown: "neither XDG_STATE_HOME, XDG_DATA_HOME nor HOME names the grant state: no folder can be told apart from an app's")
            }
        }
        return .ofState(state, containerBase: base)
    }

    static func folder(_ path: String) throws -> OwnedDescriptor {
        try folder(FilePath(path))
    }

    static func folder(_ path: FilePath) throws -> OwnedDescriptor {
        let absolute = try Broker.absolute(path) { CoordinationError.unsafePath(path, problem: $0) }
        return try SafeWalk.openFolder(absolute, trust: trust()) { CoordinationError.unsafePath(path, problem: $0) }
    }

    static func file(_ path: String) throws -> FileCoordinator.Location {
        try file(FilePath(path))
    }

    static func file(_ path: FilePath) throws -> FileCoordinator.Location {
        let full = try Broker.absolute(path) { CoordinationError.unsafePath(path, problem: $0) }
        guard let last = full.lastComponent, last.kind == .regular else { throw CoordinationError.notARegularFile(path) }
        let name = FilePath(root: nil, [last]).withPlatformString { Array(UnsafeBufferPointer(start: $0, count: strlen($0) + 1)) }
        return FileCoordinator.Location(folder: try folder(full.removingLastComponent()), name: name, path: path)
    }
}
