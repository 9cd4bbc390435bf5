@preconcurrency import Glibc
import ArgumentParser
import AppSandbox
import SystemPackage

struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run a command confined to its container and the folders granted to it.",
        discussion: """
            The command sees its container as HOME (with Documents, Library and tmp), the policy's \
            system paths read-only, the folders granted with --grant (as $SANDBOX_GRANT_NAME), and nothing else. It runs in a new session (with a pty of its own, relayed, when run on a terminal) with no capabilities, \
            no_new_privs, a clean environment and only stdin, stdout and stderr open. Every process it starts \
            is killed when it exits or when sandboxed-run dies.
            """
    )

    @OptionGroup var app: AppOptions

    @Option(help: "A built-in policy (writer, read-only, networked) or a policy file (.plist, .entitlements or .json). Default: writer.")
    var policy: String?

    @Flag(help: "Run even when the kernel cannot enforce everything the policy needs, and say what was not enforced.")
    var bestEffort = false

    @Flag(help: "Print what is enforced to stderr before starting the command.")
    var report = false

    @Option(name: .customLong("keep-fd"), help: "Keep this open descriptor (beyond 0, 1, 2) in the command. Repeatable.")
    var keptDescriptors: [Int32] = []

    @Option(name: .customLong("setenv"), help: "Set NAME=VALUE in the command's environment. Repeatable.")
    var setEnvironment: [String] = []

    @Option(name: .customLong("keep-env"), help: "Pass this variable from your environment to the command. Repeatable.")
    var keptEnvironment: [String] = []

    @Option(name: .customLong("grant"), help: "NAME=FILE: resolve the bookmark FILE and give the command its folder, as $SANDBOX_GRANT_NAME. Repeatable.")
    var grants: [String] = []

    @Option(help: "When a granted folder moved: fail, prompt (pick again), or follow (accept the move and rewrite the bookmark). Default: prompt on a terminal, else fail.")
    var onStale: StaleChoice?

    @Option(help: "When a grant's bookmark file does not exist: fail, or prompt (pick the folder now and write it).")
    var onMissing: MissingChoice = .fail

    @Option(name: .customLong("chdir"), help: "The command's working directory, a folder the sandbox can reach (default: its container). A relative command is found from it.")
    var workingDirectory: String?

    @Flag(help: "Explain each operation the sandbox refuses, on stderr, while the command runs: the path or syscall, the layer, and the grant or policy key that would allow it.")
    var explain = false

    @Option(name: .customLong("denials"), help: "Append each refused operation to FILE as JSON lines (outside every grant and the container).")
    var denialsFile: String?

    @Option(name: .customLong("denials-limit"), help: "With --denials: the most the log may hold, in bytes, or with K, M or G (KiB, MiB, GiB); beyond, one record says it was cut and the command runs on. Default: 16M.")
    var denialsLimit: String?

    @Flag(help: "Have the supervisor decide every chmod, chown, utimes and xattr write (EPERM outside the writable folders) instead of read-only mounts (EROFS, at native speed). --explain implies it.")
    var superviseMetadata = false

    @Argument(parsing: .captureForPassthrough, help: "The command and its arguments, after --.")
    var command: [String] = []

    mutating func run() throws {
        if command.first == "--" { command.removeFirst() }
        try RunOptions(
            app: app.app, policy: policy, bestEffort: bestEffort, report: report, keptDescriptors: keptDescriptors,
            setEnvironment: setEnvironment, keptEnvironment: keptEnvironment, grants: grants, onStale: onStale,
            onMissing: onMissing, workingDirectory: workingDirectory, explain: explain, denialsFile: denialsFile,
            denialsLimit: denialsLimit, superviseMetadata: superviseMetadata, command: command
        ).execute()
    }
}

/// `run`'s options, parsed by ArgumentParser (Run) or by the fast path
/// (`RunOptions.parse`), which costs no reflection at start-up.
struct RunOptions {
    var app: String
    var policy: String?
    var bestEffort = false
    var report = false
    var keptDescriptors: [Int32] = []
    var setEnvironment: [String] = []
    var keptEnvironment: [String] = []
    var grants: [String] = []
    var onStale: StaleChoice?
    var onMissing: MissingChoice = .fail
    var workingDirectory: String?
    var explain = false
    var denialsFile: String?
    var denialsLimit: String?
    var superviseMetadata = false
    var command: [String] = []

    /// Options that may be given once.
    static let single = [
        "--app", "--policy", "--on-stale", "--on-missing", "--chdir", "--best-effort", "--report", "--explain", "--denials",
        "--denials-limit", "--supervise-metadata",
    ]

    /// The fast path: `options` are `run`'s arguments before `--`, `command`
    /// what follows it. nil for anything it does not take exactly as
    /// ArgumentParser would (help, an unknown or repeated option, a bad
    /// value, a missing --app or command): ArgumentParser then parses the
    /// same words and gives its own help or error.
    static func parse(_ options: ArraySlice<String>, command: [String]) -> RunOptions? {
        var unknown: String?
        return parse(options, command: command, unknown: &unknown)
    }

    /// The same; `unknown` says what is wrong when the words cannot be `run`'s
    /// whoever parses them (an option `run` does not have, one given twice).
    static func parse(_ options: ArraySlice<String>, command: [String], unknown: inout String?) -> RunOptions? {
        guard !command.isEmpty else { return nil }
        var app: String?
        var parsed = RunOptions(app: "", command: command)
        var seen: [String] = []  // an array: a Set's first use costs more than this whole parse
        var index = options.startIndex
        func value() -> String? {
            index += 1
            guard index < options.endIndex, !options[index].hasPrefix("-") else { return nil }
            return options[index]
        }
        while index < options.endIndex {
            let word = options[index]
            // --name=value: split once, as ArgumentParser does.
            var name = word
            var inline: String?
            if word.hasPrefix("--"), let equals = word.firstIndex(of: "=") {
                name = String(word[..<equals])
                inline = String(word[word.index(after: equals)...])
            }
            func take() -> String? { inline ?? value() }
            if Self.single.contains(name) {
                // ArgumentParser would keep the last one silently: a second
                // --policy must not quietly replace the first.
                guard !seen.contains(name) else { unknown = "\(name) given twice: give it once"; return nil }
                seen.append(name)
            }
            switch name {
            case "--app": guard let v = take() else { return nil }; app = v
            case "--policy": guard let v = take() else { return nil }; parsed.policy = v
            case "--best-effort": guard inline == nil else { return nil }; parsed.bestEffort = true
            case "--report": guard inline == nil else { return nil }; parsed.report = true
            case "--keep-fd": guard let v = take(), let fd = Int32(v) else { return nil }; parsed.keptDescriptors.append(fd)
            case "--setenv": guard let v = take() else { return nil }; parsed.setEnvironment.append(v)
            case "--keep-env": guard let v = take() else { return nil }; parsed.keptEnvironment.append(v)
            case "--grant": guard let v = take() else { return nil }; parsed.grants.append(v)
            case "--on-stale": guard let v = take(), let choice = StaleChoice(rawValue: v) else { return nil }; parsed.onStale = choice
            case "--on-missing": guard let v = take(), let choice = MissingChoice(rawValue: v) else { return nil }; parsed.onMissing = choice
            case "--chdir": guard let v = take() else { return nil }; parsed.workingDirectory = v
            case "--explain": guard inline == nil else { return nil }; parsed.explain = true
            case "--supervise-metadata": guard inline == nil else { return nil }; parsed.superviseMetadata = true
            case "--denials": guard let v = take() else { return nil }; parsed.denialsFile = v
            case "--denials-limit": guard let v = take() else { return nil }; parsed.denialsLimit = v
            case "-h", "--help": return nil
            default:
                // A mistyped option is an error here, where it is still known
                // as one: ArgumentParser would take it and every word after it
                // as the command's.
                if name.hasPrefix("-") { unknown = "unknown option '\(name)' (see sandboxed-run run --help)"; return nil }
                return nil  // a positional before --: ArgumentParser says it its way
            }
            index += 1
        }
        guard let app else { return nil }
        parsed.app = app
        return parsed
    }

    func execute() throws {
        // Before the launcher opens anything (see `LaunchRequest.checkKept`).
        try LaunchRequest.checkKept(keptDescriptors)
        LaunchPhases.mark("arguments")
        var host = Environment.current
        for (name, value) in Environment.variables(keptEnvironment) { host[name] = value }
        let session = try SandboxSession(environment: host)
        let policy = try PolicyChoice.load(self.policy, session: session)
        LaunchPhases.mark("policy")
        // The protected folders, and the policy's writable folders recorded
        // before the app can plant anything there.
        var request = try session.launchRequest(app: try AppID(app), policy: policy, command: command)
        request.keptDescriptors = keptDescriptors
        request.keptEnvironment = keptEnvironment
        request.workingDirectory = try workingDirectory.map { path throws(SandboxError) in try Broker.absolute(path) }
        request.compatibility = bestEffort ? .bestEffort : .hardRequirement
        request.terminal = .automatic  // a terminal among stdin/stdout/stderr: the command gets its own pty
        if explain { request.explainDenials = 2 }
        if let denialsLimit {
            guard denialsFile != nil else { throw SandboxError.usage("--denials-limit needs --denials FILE: it bounds that log") }
            request.denialLogBytes = try DenialLog.byteLimit(denialsLimit)
        }
        if let denialsFile { request.denialLog = try DenialLog.open(
                try Broker.absolute(RawArguments.value(of: "--denials") ?? FilePath(denialsFile)) { SandboxError.usage("--denials \(denialsFile): \($0)") },
                trust: session.linkTrust()) }
        if !grants.isEmpty {
            let launchGrants = try GrantResolver.launchGrants(
                app: request.app, policy: policy, onStale: onStale ?? (GrantResolver.hasTerminal ? .prompt : .fail),
                onMissing: onMissing)
            for spec in grants {
                let (name, file) = try LaunchGrants.parse(spec)
                let (rule, variable) = try launchGrants.resolve(name: name, bookmark: Broker.absolute(file))
                request.folders.append(rule)
                request.pathVariables[variable] = rule.path
            }
        }
        for assignment in setEnvironment {
            guard let equals = assignment.firstIndex(of: "=") else {
                throw SandboxError.usage("--setenv '\(assignment)': write NAME=VALUE")
            }
            request.environment[String(assignment[..<equals])] = String(assignment[assignment.index(after: equals)...])
        }

        request.readOnlyMounts = !superviseMetadata
        LaunchPhases.mark("request")
        let plan = try ConfinementPlan(request)
        if report || !plan.report.missing.isEmpty {
            Console.lines(plan.report.text.split(separator: "\n").map(String.init))
        }
        // Catch termination signals from now on, forward them once the child exists.
        ConfinedProcess.holdTerminationSignals()
        let process = try plan.launch()
        if report {
            Console.error(process.namespaces.contains(.readOnlyMounts)
                ? "metadata changes: native in the writable folders, refused elsewhere by read-only mounts (EROFS)"
                : "metadata changes: decided by the supervisor (EPERM outside the writable folders)")
            if let reparenting = plan.reparentingSummary { Console.error(reparenting) }
        }
        process.forwardSignals()
        let termination = try process.wait()
        LaunchPhases.mark("command ran")
        LaunchPhases.report()
        if let line = process.denials?.finish(termination) { Console.error(line) }
        Glibc.exit(termination.exitCode)
    }
}

/// `--policy`: a built-in name or a file (see `SandboxSession.policy(named:)`).
enum PolicyChoice {
    static func load(_ choice: String?, session: SandboxSession) throws -> Policy {
        let policy = try session.policy(named: choice)
        for warning in policy.warnings { Console.warning("policy \(policy.source): \(warning)") }
        return policy
    }
}
