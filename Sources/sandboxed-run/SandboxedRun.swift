@preconcurrency import Glibc
import ArgumentParser
import CSyscalls
import AppSandbox
import SystemPackage

@main
struct SandboxedRun: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sandboxed-run",
        abstract: "Run untrusted writer tools confined to their own container and the folders you grant.",
        discussion: """
            Exit codes of `run`: the command's own status, or 128+N when it was killed by signal N; \
            125 when sandboxed-run itself failed (bad usage, bad policy, protection unavailable), \
            126 when the command cannot be executed, 127 when it was not found.
            """,
        // Every command names itself: otherwise ArgumentParser derives each name
        // with String(describing:), a third of the launcher's start-up (callgrind).
        version: SandboxedRunVersion.description,
        subcommands: [Run.self, Pick.self, Resolve.self, GrantsCommand.self, Container.self, Doctor.self, Append.self, OpenPanel.self, StartAccessing.self, StopAccessing.self, Coordinate.self, SyncSimulatorCommand.self, Versions.self, Review.self]
    )

    /// Runs a command and turns every failure into one line on stderr and a documented exit code.
    static func main() {
        LaunchPhases.start()
        // `run`: parsed by its one table (`RunOptions`), with no reflection;
        // the command after `--` is taken verbatim, so its length costs nothing.
        let options = Array(Self.arguments.dropFirst())
        // `--version` alone, answered as ArgumentParser would: its parse
        // costs 5 million instructions (its reflection's first conformance
        // lookups each scan the binary's 4,600 records), 90% of the run.
        if options == ["--version"] {
            Console.write(SandboxedRunVersion.description + "\n", to: 1)
            return
        }
        do {
            if options.first == "run" {
                let parsed: RunOptions?
                do { parsed = try RunOptions.parse(options.dropFirst()) } catch .usage(let message) {
                    Usage.fail(message, options: options)
                }
                if let parsed { try parsed.execute() }
                throw CleanExit.helpRequest(Run.self)
            }
            var command = try parseAsRoot(options)
            try command.run()
        } catch let error as SandboxError {
            Console.error(Hints.message(for: error))
            Glibc.exit(error.exitCode)
        } catch let error as SandboxSessionError {
            Console.error(error.description)
            Glibc.exit(125)
        } catch let error as LaunchGrantError {
            Console.error(Hints.message(for: error))
            Glibc.exit(125)
        } catch let error as StagingError {
            Console.error(error.description)
            Glibc.exit(125)
        } catch let error as GrantError {
            Console.error(Hints.message(for: error))
            Glibc.exit(error == .cancelled ? 1 : 125)
        } catch let error as ExitCode {
            Glibc.exit(error.rawValue)
        } catch {
            switch exitCode(for: error) {
            case .success: exit(withError: error)  // --help, --version
            case .validationFailure: Usage.fail(message(for: error), options: options)
            default:
                Console.error(message(for: error))
                Glibc.exit(125)
            }
        }
    }
}

extension SandboxedRun {
    /// argv as the loader passed it. The Swift runtime reads
    /// /proc/self/cmdline instead, which a sandbox without a /proc of its own
    /// cannot read: and `$SANDBOXED_RUN append` runs inside sandboxes.
    static var arguments: [String] {
        let count = Int(csb_saved_argc())
        guard count > 0, let argv = csb_saved_argv() else { return CommandLine.arguments }
        return (0..<count).map { String(cString: argv[$0]!) }
    }
}

/// A usage error, said alike by every command: what was wrong and the
/// command's own usage on one line, where its help is on a second; exit 125.
enum Usage {
    static func fail(_ problem: String, options: [String]) -> Never {
        let command = command(named: options)
        let names = command.map { $0.configuration.commandName ?? "" }
        // ArgumentParser's text may wrap, or pad its columns with spaces.
        let clean = { (text: String) in text.split(whereSeparator: \.isWhitespace).joined(separator: " ") }
        var problem = clean(problem)
        if problem.hasSuffix(".") { problem.removeLast() }
        // ArgumentParser's "Unknown option": said as the tool says the rest.
        if let first = problem.first, first.isUppercase, problem.dropFirst().first?.isLowercase == true {
            problem = first.lowercased() + problem.dropFirst()
        }
        let subcommand = names.dropFirst().joined(separator: " ")
        if !subcommand.isEmpty, !problem.hasPrefix(subcommand + ": ") { problem = subcommand + ": " + problem }
        Console.error(problem + " (usage: \(clean(SandboxedRun.usageString(for: command.last!))))")
        Console.error("see `\(names.joined(separator: " ")) --help`")
        Glibc.exit(125)
    }

    /// The command the arguments name: its leading words that are subcommand names.
    static func command(named options: [String]) -> [ParsableCommand.Type] {
        var stack: [ParsableCommand.Type] = [SandboxedRun.self]
        for word in options {
            guard let next = stack.last!.configuration.subcommands.first(where: { $0.configuration.commandName == word }) else { break }
            stack.append(next)
        }
        return stack
    }
}

/// stderr output with the tool's name, so users know who is speaking.
enum Console {
    /// One line, escaped: messages quote names the app chose.
    static func error(_ message: String) {
        write("sandboxed-run: \(Printable.message(message))\n")
    }

    static func warning(_ message: String) {
        write("sandboxed-run: warning: \(Printable.message(message))\n")
    }

    static func notice(_ message: String) {
        write("sandboxed-run: notice: \(Printable.message(message))\n")
    }

    /// Lines for people, each escaped on its own.
    static func lines(_ lines: String...) { self.lines(lines) }

    static func lines(_ lines: [String]) {
        write(lines.map { Printable.message($0) + "\n" }.joined())
    }

    /// Lines whose names the caller escaped already (`Printable`), as they
    /// are: escaped again, a name's `\n` would be shown as `\\n`.
    static func escapedLines(_ lines: [String], to descriptor: CInt = 2) {
        write(lines.map { $0 + "\n" }.joined(), to: descriptor)
    }

    static func write(_ text: String, to descriptor: CInt = 2) {
        var text = text
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if written <= 0 { if errno == EINTR { continue } else { return } }
                offset += written
            }
        }
    }
}

/// Options shared by the commands that name an app.
struct AppOptions: ParsableArguments {
    @Option(name: .long, help: "The app's identifier, such as com.example.memo: it names the app's container and grants.")
    var app: String

    func appID() throws(SandboxError) -> AppID { try AppID(app) }

    static func containerBase() throws -> String {
        try SandboxSession.cli().containerBase
    }
}

enum Environment {
    /// The variables the launcher itself reads. Copying the whole
    /// environment instead cost about 0.15 ms of every launch (thirty-odd
    /// strings and a dictionary, each made for the first time).
    static let read = ["HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "LANG", "TERM"]

    /// Those of `read` that are set, read once: the launcher never changes its own.
    static let current: [String: String] = variables(read)

    /// `names` from the launcher's environment, those that are set.
    static func variables(_ names: [String]) -> [String: String] {
        var result: [String: String] = [:]
        for name in names {
            if let value = getenv(name) { result[name] = String(cString: value) }
        }
        return result
    }
}

/// The launcher's arguments as the kernel passed them: bytes. The parser
/// sees Swift strings, where a name that is not UTF-8 has been altered.
enum RawArguments {
    /// The bytes of every argument after the first `--`; nil without one.
    static func command() -> [[UInt8]]? {
        var words: [[UInt8]] = []
        var after = false
        for index in 1..<max(1, Int(CommandLine.argc)) {
            guard let pointer = CommandLine.unsafeArgv[index] else { break }
            let argument = Array(UnsafeBufferPointer(start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self), count: strlen(pointer)))
            if after { words.append(argument) } else if argument == Array("--".utf8) { after = true }
        }
        return after ? words : nil
    }

    /// The operands after the subcommand word `subcommand` (`review accept`'s
    /// paths), as bytes: options and `--app`'s value left out.
    static func operands(of subcommand: String) -> [[UInt8]] {
        var words: [[UInt8]] = []
        var seen = false
        var skipNext = false
        for index in 1..<max(1, Int(CommandLine.argc)) {
            guard let pointer = CommandLine.unsafeArgv[index] else { break }
            let word = Array(UnsafeBufferPointer(start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self), count: strlen(pointer)))
            if !seen { seen = word == Array(subcommand.utf8); continue }
            if skipNext { skipNext = false; continue }
            if word == Array("--app".utf8) { skipNext = true; continue }
            if word.starts(with: Array("--".utf8)) || word == Array("-h".utf8) { continue }
            words.append(word)
        }
        return words
    }

    /// The bytes of the last `NAME VALUE` or `NAME=VALUE` among the arguments.
    static func value(of name: String) -> FilePath? {
        var found: FilePath?
        let count = Int(CommandLine.argc)
        var index = 1
        while index < count, let pointer = CommandLine.unsafeArgv[index] {
            let argument = Array(UnsafeBufferPointer(start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self), count: strlen(pointer)))
            if argument == Array("--".utf8) { break }
            if argument == Array(name.utf8), index + 1 < count, let value = CommandLine.unsafeArgv[index + 1] {
                found = FilePath(platformString: value)
                index += 1
            } else if argument.starts(with: Array((name + "=").utf8)) {
                found = FilePath(bytes: Array(argument.dropFirst(name.utf8.count + 1)))
            }
            index += 1
        }
        return found
    }
}

/// The library's errors name what was wrong; the CLI adds how to say it
/// right with its own options.
enum Hints {
    static func message(for error: SandboxError) -> String {
        switch error {
        case .descriptorNotOpen(let fd): "--keep-fd \(fd): that descriptor is not open"
        case .protectionUnavailable: error.description + " Run `sandboxed-run doctor` for details, or pass --best-effort to run with less protection."
        case .explainUnsupported: "--explain and --denials: " + error.description
        case .workingDirectoryUnreachable, .workingDirectoryTooLong: "--chdir " + error.description
        case .denialLog(let path, let problem): "--denials" + (path.map { " " + Printable.path($0) } ?? "") + ": " + problem
        case .viewUnavailable: error.description + ". Pass --view host to run in the host view (every host path visible to stat, "
            + "read-only where the rules allow), or --best-effort to fall back to it whenever the private view cannot be built"
        default: error.description
        }
    }

    static func message(for error: GrantError) -> String {
        switch error {
        case .grantSpecification: "--grant " + error.description
        default: error.description
        }
    }

    static func message(for error: LaunchGrantError) -> String {
        switch error.problem {
        case .bookmarkMissing(let app):
            error.description + ": make one with `sandboxed-run pick --app \(app) -o \(error.file)`, or pass --on-missing prompt"
        case .noPicker: error.description + ": make the bookmark with `sandboxed-run pick`"
        case .moved: error.description + ". Pass --on-stale follow to accept the new place, or --on-stale prompt to choose again."
        default: error.description
        }
    }

    static func message(for notice: LaunchGrantNotice) -> String {
        switch notice {
        case .stale: notice.description + " (--on-stale follow rewrites it)"
        default: notice.description
        }
    }
}

extension SandboxSession {
    /// The CLI's session: its locations from the launcher's own environment.
    static func cli() throws(SandboxSessionError) -> SandboxSession {
        try SandboxSession(environment: Environment.current)
    }
}
