@preconcurrency import Glibc
import ArgumentParser
import CSyscalls
import Coordination
import AppSandbox
import SystemPackage

/// Exit codes of `append` and `coordinate` (sysexits.h): what a script can act on.
enum CoordinationExit {
    static let notOneLine: Int32 = 65  // EX_DATAERR: fix the record
    static let ioError: Int32 = 74     // EX_IOERR: nothing was written
    static let tryLater: Int32 = 75    // EX_TEMPFAIL: locked too long, or not downloaded yet
    static let refused: Int32 = 125    // not a regular file, a link, a damaged journal, another protocol version, bad usage

    static func code(for error: CoordinationError) -> Int32 {
        switch error {
        case .notOneLine: notOneLine
        case .timedOut, .placeholder: tryLater
        case .system: ioError
        case .notARegularFile, .link, .damagedJournal, .damagedPlaceholder, .otherProtocolVersion, .noSuchVersion, .unsafePath, .interfered,
             .untrusted, .unclaimedCopy: refused
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
            another append), never joins the line to another, and exits 0 only when the line is \
            durably in the file (the file and its folder flushed to disk). Exit codes: 65 TEXT is \
            not one line; 74 an I/O error (nothing written; or flushing failed, and the line is not \
            known to be on disk); 75 try later (locked longer than \
            --timeout, or FILE is only a placeholder); 125 FILE is not a regular file, is a link, \
            has a damaged journal, one of another protocol version or one another user could have \
            written, or bad usage. \
            \(OptionGrammar.help) \
            Inside the sandbox the launcher's own binary is $SANDBOXED_RUN.
            """
    )

    @Argument(help: "The file (created if missing; its folder must exist).")
    var file: String

    @Argument(help: "The line to append, without a newline.")
    var text: String

    @Option(parsing: .unconditional, help: ArgumentHelp("Seconds to wait for other parties (default 30).", valueName: "seconds"))
    var timeout: String?

    @Option(parsing: .unconditional,
            help: ArgumentHelp("When FILE is only a placeholder, ask the sync daemon for it and wait this many seconds (default: refuse at once).",
                               valueName: "seconds"))
    var download: String?

    func validate() throws {
        try OptionGrammar.once(["--timeout", "--download"])
        _ = try Seconds.option(timeout, "--timeout")
        _ = try Seconds.option(download, "--download")
    }

    func run() throws {
        let coordinator = FileCoordinator(timeout: try Seconds.option(timeout, "--timeout") ?? .seconds(30))
        let wait = try Seconds.option(download, "--download")
        try CoordinationExit.run {
            let location = try UnconfinedPath.file(bytes: RawArguments.originalPath(of: file))
            let record = try RawArguments.original(of: text)
            guard let wait else { return try coordinator.append(line: record, to: location) }
            // Evicted again between the download and the lock: ask again, within the same wait.
            let deadline = ContinuousClock.now + wait
            while true {
                try Placeholder.download(location, timeout: max(.zero, deadline - ContinuousClock.now))
                do {
                    return try coordinator.append(line: record, to: location)
                } catch CoordinationError.placeholder(let path) {
                    if ContinuousClock.now >= deadline { throw CoordinationError.placeholder(path) }
                }
            }
        }
    }
}

/// The options of the coordination commands are each taken once, and their
/// numbers are decimal. ArgumentParser keeps the last of a repeated option
/// silently, reads `-1` as another option and takes what Swift's number
/// parsers take (`0x10`, `1e3`, `inf`): so numbers are taken as the word
/// after the option, whatever it looks like, and parsed here, and the words
/// before `--` are counted; either is a usage error (125) naming the option.
enum OptionGrammar {
    static let help = "Each option may be given once. Numbers are decimal: digits, optionally a point and more digits (30, 0.25); " +
        "no sign, exponent, hexadecimal, inf or nan."

    /// Refuses any of `options` given more than once (as `--name VALUE` or
    /// `--name=VALUE`) among the words before `--`: what follows is COMMAND's.
    static func once(_ options: [String], in arguments: [String] = SandboxedRun.arguments) throws {
        let words = arguments.dropFirst().prefix { $0 != "--" }
        for option in options {
            let count = words.filter { $0 == option || $0.hasPrefix(option + "=") }.count
            guard count <= 1 else { throw ValidationError("\(option) was given \(count) times: give it once") }
        }
    }

    /// A decimal number, `DIGITS[.DIGITS]`; a `-` before one is parsed too,
    /// for the caller to refuse as out of range rather than as no number.
    static func decimal(_ text: String) -> Double? {
        let number = text.hasPrefix("-") ? text.utf8.dropFirst() : text.utf8[...]
        let parts = number.split(separator: UInt8(ascii: "."), maxSplits: 1, omittingEmptySubsequences: false)
        let isDigit = { (byte: UInt8) in (0x30...0x39).contains(byte) }
        guard number.count <= 40, parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy(isDigit) }) else { return nil }
        return Double(text)
    }
}

/// Seconds given as options: decimal, from 0 to `largest`.
enum Seconds {
    static let largest = 1_000_000.0

    static func option(_ text: String?, _ option: String) throws -> Duration? {
        guard let text else { return nil }
        guard let value = OptionGrammar.decimal(text), value >= 0, value <= largest else {
            throw ValidationError("\(option) \(Printable.message(text)) is not a number of seconds from 0 to \(Int(largest)) "
                + "written as decimal digits with an optional fraction (30, 0.25): give one in that range")
        }
        return .nanoseconds(Int64((value * 1e9).rounded()))
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
            Exits with COMMAND's status, or as `append` does when coordination fails. \
            \(OptionGrammar.help)
            """
    )

    enum Intent: String, ExpressibleByArgument, CaseIterable { case merging, replacing, deleting, moving }

    @Option(help: ArgumentHelp("Coordinate reading FILE.", valueName: "file"))
    var read: String?

    @Option(help: ArgumentHelp("Coordinate writing FILE.", valueName: "file"))
    var write: String?

    @Option(help: ArgumentHelp("The writing intent.", valueName: "intent"))
    var intent: Intent = .merging

    @Option(parsing: .unconditional, help: ArgumentHelp("Seconds to wait for other parties (default 30).", valueName: "seconds"))
    var timeout: String?

    @Argument(parsing: .postTerminator, help: "The command, after --.")
    var command: [String] = []

    func validate() throws {
        try OptionGrammar.once(["--read", "--write", "--intent", "--timeout"])
        guard (read == nil) != (write == nil) else { throw ValidationError("give exactly one of --read FILE and --write FILE") }
        guard !command.isEmpty else { throw ValidationError("no command given: put it after --") }
        _ = try Seconds.option(timeout, "--timeout")
    }

    func run() throws {
        let coordinator = FileCoordinator(timeout: try Seconds.option(timeout, "--timeout") ?? .seconds(30))
        var status: Int32 = 0
        try CoordinationExit.run {
            if let read {
                let location = try UnconfinedPath.file(bytes: RawArguments.originalPath(of: read))
                try coordinator.coordinate(reading: location) { item in
                    guard item.descriptor != nil else {
                        if try Placeholder.status(of: location) == .notDownloaded { throw CoordinationError.placeholder(location.path) }
                        throw CoordinationError.system(operation: "reading", path: location.path, errno: .noSuchFileOrDirectory)
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
                try coordinator.coordinate(writing: try UnconfinedPath.file(bytes: RawArguments.originalPath(of: write)), options: intent) { item in
                    status = try spawn(item)
                    if intent == .forReplacing, status != 0 { throw ExitCode(status) }  // the temporary file is discarded
                }
            }
        }
        throw ExitCode(status)
    }

    /// COMMAND with COORDINATED_PATH set; its wait status as a shell reports it.
    /// The path goes through a descriptor COMMAND inherits, so an app that
    /// swaps a name for a link meanwhile cannot send COMMAND outside its
    /// folder. That descriptor is a new open of the same inode (O_PATH,
    /// through /proc/self/fd), never a `dup` of the locked one: an OFD lock
    /// belongs to the open file description, and a background child of
    /// COMMAND holding a copy would keep the item locked after we returned.
    private func spawn(_ item: FileCoordinator.Item) throws -> Int32 {
        var inherited: CInt = -1
        defer { if inherited >= 0 { close(inherited) } }
        var path = item.path
        if item.throughDescriptor {
            inherited = csb_open_path(AT_FDCWD, "/proc/self/fd/\(item.anchor)", 1)
            guard inherited >= 0, fcntl(inherited, F_SETFD, 0) == 0 else {  // without FD_CLOEXEC: COMMAND inherits it
                throw CoordinationError.system(operation: "reopening", path: item.path, errno: Errno(rawValue: errno))
            }
            path = item.path(through: inherited)
        }
        var environment = ProcessEnvironment.current.filter { !$0.starts(with: Array("COORDINATED_PATH=".utf8)) }
        environment.append(Array("COORDINATED_PATH=".utf8) + path.bytes)
        let argv = command.map { strdup($0) } + [nil]
        let envp = environment.map { bytes in (bytes.map { CChar(bitPattern: $0) } + [0]).withUnsafeBufferPointer { strdup($0.baseAddress!) } } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let error = posix_spawnp(&pid, command[0], nil, nil, argv, envp)
        guard error == 0 else {
            Console.error("\(Printable.message(command[0])): \(Errno(rawValue: error))")
            return error == ENOENT ? 127 : 126
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return Termination(waitStatus: status).exitCode
    }
}

enum ProcessEnvironment {
    /// The environment as bytes: values need not be UTF-8.
    static var current: [[UInt8]] {
        var list: [[UInt8]] = []
        var entry = environ
        while let pointer = entry.pointee {
            list.append(Array(UnsafeBufferPointer(start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self), count: strlen(pointer))))
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
            .NAME.icloud.download beside its placeholder. \
            \(OptionGrammar.help)
            """
    )

    @Argument(help: "The folder to act on.")
    var folder: String

    @Option(parsing: .unconditional, help: ArgumentHelp("Stop after this many seconds (default: until SIGINT or SIGTERM).", valueName: "seconds"))
    var seconds: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("The random seed, a whole number (default 1): the same seed makes the same run.", valueName: "seed"))
    var seed: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Remote edits (whole files rewritten) per second (default 1).", valueName: "rate"))
    var editRate: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Evictions to placeholders, and materialisations, per second (default 0).", valueName: "rate"))
    var evictRate: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Concurrent changes that end in a conflict version, per second (default 0).", valueName: "rate"))
    var conflictRate: String?

    @Flag(help: "Ignore the coordination protocol (to show the failure).")
    var naive = false

    @Flag(help: "At the end, leave evicted files as placeholders (default: bring them back).")
    var leavePlaceholders = false

    /// A rate option: decimal, from 0 to 1000 per second.
    static func rate(_ text: String?, _ option: String, default value: Double) throws -> Double {
        guard let text else { return value }
        guard let rate = OptionGrammar.decimal(text), rate >= 0, rate <= 1000 else {
            throw ValidationError("\(option) \(Printable.message(text)) is not a rate from 0 to 1000 per second written as decimal digits "
                + "with an optional fraction (2, 0.5): give one in that range")
        }
        return rate
    }

    static func seed(_ text: String?) throws -> UInt64 {
        guard let text else { return 1 }
        guard text.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let seed = UInt64(text) else {
            throw ValidationError("--seed \(Printable.message(text)) is not a whole number from 0 to \(UInt64.max) written in decimal digits")
        }
        return seed
    }

    func validate() throws {
        try OptionGrammar.once(["--seconds", "--seed", "--edit-rate", "--evict-rate", "--conflict-rate"])
        _ = try Self.rate(editRate, "--edit-rate", default: 1)
        _ = try Self.rate(evictRate, "--evict-rate", default: 0)
        _ = try Self.rate(conflictRate, "--conflict-rate", default: 0)
        _ = try Self.seed(seed)
        _ = try Seconds.option(seconds, "--seconds")
    }

    func run() throws {
        var options = SyncSimulator.Options()
        options.seed = try Self.seed(seed)
        options.editRate = try Self.rate(editRate, "--edit-rate", default: 1)
        options.evictRate = try Self.rate(evictRate, "--evict-rate", default: 0)
        options.conflictRate = try Self.rate(conflictRate, "--conflict-rate", default: 0)
        options.naive = naive
        options.restoreOnStop = !leavePlaceholders
        options.report = { Console.warning($0) }
        // SIGINT and SIGTERM are held and looked for between ticks: a clean stop, never mid-write.
        var stopping = sigset_t()
        sigemptyset(&stopping)
        sigaddset(&stopping, SIGINT)
        sigaddset(&stopping, SIGTERM)
        pthread_sigmask(SIG_BLOCK, &stopping, nil)
        let deadline = try Seconds.option(seconds, "--seconds").map { ContinuousClock.now + $0 }
        var counts = SyncSimulator.Counts()
        try CoordinationExit.run {
            let path = try RawArguments.originalPath(of: folder)
            let simulator = SyncSimulator(folder: path, descriptor: try UnconfinedPath.folder(bytes: path), options: options)
            counts = try simulator.run {
                var pending = sigset_t()
                sigpending(&pending)
                if sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1 { return true }
                return deadline.map { ContinuousClock.now >= $0 } ?? false
            }
        }
        print("uploads \(counts.uploads), edits \(counts.edits), evictions \(counts.evictions), "
            + "materialisations \(counts.materialisations), conflicts \(counts.conflicts), skipped \(counts.skipped), "
            + "leftovers removed \(counts.leftovers), refused \(counts.refused)")
    }
}

struct Versions: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "versions",
        abstract: "List, show and resolve a file's conflict versions (as NSFileVersion).",
        discussion: """
            list FILE: one line per version (identifier, time, side). show FILE ID: its contents. \
            resolve FILE [--keep current|newest|ID]: keep one (default newest: last writer wins by \
            modification time), remove the others. Versions of FILE are kept in \
            .sandboxed-run-versions/FILE beside it; one of those folders that another user made \
            (or that others may write, or that has a default ACL) is refused (exit 125), and a file \
            in it that someone who may not write FILE made is not listed. Each option may be given once.
            """
    )

    enum Action: String, ExpressibleByArgument, CaseIterable { case list, show, resolve }

    @Argument(help: "list, show or resolve.")
    var action: Action

    @Argument(help: "The file.")
    var file: String

    @Argument(help: "The version's identifier (for show).")
    var identifier: String?

    @Option(help: ArgumentHelp("What resolve keeps: current, newest, or a version's identifier.", valueName: "choice"))
    var keep: String = "newest"

    func validate() throws {
        try OptionGrammar.once(["--keep"])
    }

    func run() throws {
        try CoordinationExit.run {
            let path = try UnconfinedPath.file(bytes: RawArguments.originalPath(of: file))
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

/// Entry points by bytes: a folder's name need not be UTF-8, and the
/// `String` an argument parser hands over has replaced what is not with
/// U+FFFD, naming a folder that does not exist.
extension UnconfinedPath {
    static func folder(bytes path: FilePath) throws -> OwnedDescriptor { try folder(path) }
    static func file(bytes path: FilePath) throws -> FileCoordinator.Location { try file(path) }
}

extension RawArguments {
    /// The bytes the kernel passed for the argument the parser decoded as
    /// `decoded` (an argument, or the value after `NAME=`): the decoded
    /// string itself when it was UTF-8 all along. Two different arguments
    /// that decode alike cannot be told apart: a usage error, never a guess.
    /// Bytes, not a `FilePath`, which would fold `//` and drop a trailing `/`
    /// (a record's text is no path).
    static func original(of decoded: String) throws -> [UInt8] {
        guard decoded.unicodeScalars.contains("\u{FFFD}") else { return Array(decoded.utf8) }
        let count = Int(csb_saved_argc())
        guard count > 1, let argv = csb_saved_argv() else { return Array(decoded.utf8) }
        var found: [UInt8]?
        for index in 1..<count {
            guard let pointer = argv[index] else { continue }
            let argument = Array(UnsafeBufferPointer(start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self), count: strlen(pointer)))
            var candidates = [argument]
            if argument.starts(with: Array("--".utf8)), let equals = argument.firstIndex(of: UInt8(ascii: "=")) {
                candidates.append(Array(argument[(equals + 1)...]))
            }
            for candidate in candidates where String(decoding: candidate, as: UTF8.self) == decoded {
                if let found, found != candidate {
                    throw CoordinationError.unsafePath(FilePath(bytes: candidate), problem:
                        "two arguments that are not UTF-8 read alike, so which one names the file cannot be told; rename one, or run it from a folder where a UTF-8 name reaches it")
                }
                found = candidate
            }
        }
        return found ?? Array(decoded.utf8)
    }

    /// The same, as a path.
    static func originalPath(of decoded: String) throws -> FilePath { FilePath(bytes: try original(of: decoded)) }
}

/// Paths these commands take from the user, walked with the library's one
/// rule for unconfined paths (`LinkTrust.ofState`): a symbolic link that
/// any app could have planted, now or once (in a container, in a folder
/// ever granted read-write, live, revoked or moved, in a policy's read-write
/// folder), or that another user could have planted, is refused.
enum UnconfinedPath {
    static func trust() -> LinkTrust {
        guard let session = try? SandboxSession.cli() else {
            return LinkTrust { LinkTrust.Facts(unknown: "HOME names no grant state: no folder can be told apart from an app's") }
        }
        return session.linkTrust()
    }

    static func folder(_ path: String) throws -> OwnedDescriptor {
        try folder(FilePath(path))
    }

    static func folder(_ path: FilePath) throws -> OwnedDescriptor {
        let absolute = try Picking.absolute(path) { CoordinationError.unsafePath(path, problem: $0) }
        return try SafeWalk.openFolder(absolute, trust: trust()) { CoordinationError.unsafePath(path, problem: $0) }
    }

    static func file(_ path: String) throws -> FileCoordinator.Location {
        try file(FilePath(path))
    }

    static func file(_ path: FilePath) throws -> FileCoordinator.Location {
        let full = try Picking.absolute(path) { CoordinationError.unsafePath(path, problem: $0) }
        guard let last = full.lastComponent, last.kind == .regular else { throw CoordinationError.notARegularFile(path) }
        let name = FilePath(root: nil, [last]).withPlatformString { Array(UnsafeBufferPointer(start: $0, count: strlen($0) + 1)) }
        return FileCoordinator.Location(folder: try folder(full.removingLastComponent()), name: name, path: path)
    }
}
