@preconcurrency import Glibc
import ArgumentParser
import Coordination
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
        case .notARegularFile, .link, .damagedJournal: refused
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

    func run() throws {
        let coordinator = FileCoordinator(timeout: .milliseconds(Int64(max(0, timeout) * 1000)))
        try CoordinationExit.run { try coordinator.append(line: Array(text.utf8), to: FilePath(file)) }
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
            exits 0 (and is discarded otherwise). COMMAND finds the path to use in $COORDINATED_PATH. \
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
                try coordinator.coordinate(readingItemAt: FilePath(read)) { item in status = try spawn(item.path) }
            } else if let write {
                let intent: FileCoordinator.WritingIntent = switch intent {
                case .merging: .forMerging
                case .replacing: .forReplacing
                case .deleting: .forDeleting
                case .moving: .forMoving
                }
                try coordinator.coordinate(writingItemAt: FilePath(write), options: intent) { item in
                    status = try spawn(item.path)
                    if intent == .forReplacing, status != 0 { throw ExitCode(status) }  // the temporary file is discarded
                }
            }
        }
        throw ExitCode(status)
    }

    /// COMMAND with COORDINATED_PATH set; its wait status as a shell reports it.
    private func spawn(_ path: FilePath) throws -> Int32 {
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
