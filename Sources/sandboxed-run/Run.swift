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

    @Option(
        help: "A built-in policy (writer, read-only, networked, developer) or a policy file (.plist, .entitlements or .json). Default: writer.",
        completion: .custom { _, _, typed in PolicyChoice.completions(typed) })
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

    @Option(help: "private (default): a root holding only the container, the grants and the policy's system paths, and a network namespace of its own without a network entitlement; host: the host's tree, read-only where the rules allow, every other path visible to stat.")
    var view: FileSystemView?

    @Flag(help: "Stage every change the command makes in its read-write grants: it sees a clone of each folder in its place, the folder itself is untouched until you accept (`sandboxed-run review`). On a terminal you are asked at the end. Needs the private view. As the policy key org.sandboxed-run.files.review.")
    var review = false

    @Option(help: "A program that asks the person for a folder while the command runs (`$SANDBOXED_RUN open-panel` inside): run unconfined with the prompt as its argument, it prints the chosen folder's absolute path and a newline. Without it, the person is asked on the terminal the launcher relays. Needs the private view and a policy with a user-selected key.")
    var picker: String?

    @Option(name: .customLong("allow-host"), help: "HOST, HOST:PORT or *.SUFFIX[:PORT] (ports 80 and 443 when none is given), or an address: the command reaches only the hosts named so, through the launcher's proxy (HTTP_PROXY and ALL_PROXY are set), from a network namespace of its own; DNS answers only these names. Repeatable; added to the policy key org.sandboxed-run.network.allowed-hosts. Needs the private view.")
    var allowHost: [String] = []

    @Option(name: .customLong("resolve"), help: "NAME:ADDRESS, a testing aid as curl's --resolve: the proxy takes NAME (an allowed host) to be at ADDRESS instead of asking DNS. Repeatable.")
    var resolve: [String] = []

    @Argument(parsing: .captureForPassthrough, help: "The command and its arguments, after --.")
    var command: [String] = []

    /// `run` is parsed by `RunOptions.parse` alone (SandboxedRun.main); the
    /// declarations above describe its options to ArgumentParser for help,
    /// the man page and completions, and `RunOptionsTests` requires them to
    /// name exactly `RunOptions.table`'s options.
    mutating func run() throws {
        throw CleanExit.helpRequest(self)
    }
}

/// `run`'s options: the configuration a launch is built from (as landrun's
/// CLI fills a config and applies it), filled by one parser from one table.
struct RunOptions {
    var app = ""
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
    var view: FileSystemView = .private
    var picker: String?
    var review = false
    var allowedHosts: [AllowedHost] = []
    var resolved: [String: [IPAddress]] = [:]
    var command: [String] = []

    /// One option: its name, whether it takes a value and may repeat, and
    /// what it sets.
    struct Option {
        let name: String
        let takesValue: Bool
        let repeats: Bool
        let apply: (inout RunOptions, String) throws(SandboxError) -> Void

        static func flag(_ name: String, _ apply: @escaping (inout RunOptions) -> Void) -> Option {
            Option(name: name, takesValue: false, repeats: false) { options, _ in apply(&options) }
        }

        static func value(_ name: String, repeats: Bool = false, _ apply: @escaping (inout RunOptions, String) throws(SandboxError) -> Void) -> Option {
            Option(name: name, takesValue: true, repeats: repeats, apply: apply)
        }
    }

    /// Every option of `run`, once. A list, not a dictionary: a new key type
    /// costs the runtime a scan of every conformance at the first launch.
    nonisolated(unsafe) static let table: [Option] = [
        .value("--app") { options, text in options.app = text },
        .value("--policy") { options, text in options.policy = text },
        .flag("--best-effort") { $0.bestEffort = true },
        .flag("--report") { $0.report = true },
        .value("--keep-fd", repeats: true) { options, text throws(SandboxError) in
            guard text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let fd = Int32(text) else {
                throw .usage("run: --keep-fd \(text): give a descriptor number, such as 3")
            }
            options.keptDescriptors.append(fd)
        },
        .value("--setenv", repeats: true) { options, text in options.setEnvironment.append(text) },
        .value("--keep-env", repeats: true) { options, text in options.keptEnvironment.append(text) },
        .value("--grant", repeats: true) { options, text in options.grants.append(text) },
        .value("--on-stale") { options, text throws(SandboxError) in
            guard let choice = StaleChoice(rawValue: text) else {
                throw .usage("run: --on-stale \(text): give one of \(StaleChoice.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            options.onStale = choice
        },
        .value("--on-missing") { options, text throws(SandboxError) in
            guard let choice = MissingChoice(rawValue: text) else {
                throw .usage("run: --on-missing \(text): give one of \(MissingChoice.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            options.onMissing = choice
        },
        .value("--chdir") { options, text in options.workingDirectory = text },
        .value("--allow-host", repeats: true) { options, text throws(SandboxError) in
            do { options.allowedHosts.append(try AllowedHost(parsing: text)) } catch { throw .usage("run: --allow-host: \(error)") }
        },
        .value("--resolve", repeats: true) { options, text throws(SandboxError) in
            // NAME:ADDRESS, the address possibly IPv6 (after the first colon).
            guard let colon = text.firstIndex(of: ":"), case .success(.name(let name)) = Destination.host(String(text[..<colon])),
                  let address = IPAddress(String(text[text.index(after: colon)...].filter { $0 != "[" && $0 != "]" }))
            else {
                throw .usage("run: --resolve \(Printable.message(text)): give NAME:ADDRESS, as api.example.com:127.0.0.1")
            }
            options.resolved[name, default: []].append(address)
        },
        .flag("--explain") { $0.explain = true },
        .value("--denials") { options, text in options.denialsFile = text },
        .value("--denials-limit") { options, text in options.denialsLimit = text },
        .flag("--supervise-metadata") { $0.superviseMetadata = true },
        .value("--view") { options, text throws(SandboxError) in
            guard let view = FileSystemView(rawValue: text) else {
                throw .usage("run: --view \(text): give one of \(FileSystemView.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            options.view = view
        },
        .value("--picker") { options, text in options.picker = text },
        .flag("--review") { $0.review = true },
    ]

    /// Parses `run`'s words: options, then the command, after `--` or from
    /// the first word that is not an option. Every mistake is a usage error
    /// naming the word (an unknown or misspelt option, a value missing or
    /// wrong, a single option given twice), never a default; nil for -h or
    /// --help (ArgumentParser prints the help). No reflection, no
    /// collections of new types: this runs at every launch.
    static func parse(_ words: ArraySlice<String>) throws(SandboxError) -> RunOptions? {
        var parsed = RunOptions()
        var seen: [String] = []
        var index = words.startIndex
        while index < words.endIndex {
            let word = words[index]
            if word == "--" {
                parsed.command = Array(words[(index + 1)...])
                break
            }
            guard word.hasPrefix("-"), word != "-" else {
                // With a -- further on, everything before it is options.
                if words[index...].contains("--") {
                    throw .usage("run: unexpected argument '\(word)' before --: put the command and its arguments after --")
                }
                parsed.command = Array(words[index...])
                break
            }
            if word == "-h" || word == "--help" { return nil }
            // --name=value: split once.
            var name = word
            var inline: String?
            if word.hasPrefix("--"), let equals = word.firstIndex(of: "=") {
                name = String(word[..<equals])
                inline = String(word[word.index(after: equals)...])
            }
            guard let option = table.first(where: { $0.name == name }) else {
                throw .usage("run: unknown option '\(name)'")
            }
            if !option.repeats {
                guard !seen.contains(name) else { throw .usage("run: \(name) given twice: give it once") }
                seen.append(name)
            }
            var value = ""
            if option.takesValue {
                if let inline {
                    value = inline
                } else {
                    index += 1
                    guard index < words.endIndex, words[index] != "--", !words[index].hasPrefix("-") else {
                        throw .usage("run: \(name) needs a value (write \(name)=VALUE for one that starts with -)")
                    }
                    value = words[index]
                }
            } else if inline != nil {
                throw .usage("run: \(name) takes no value")
            }
            try option.apply(&parsed, value)
            index += 1
        }
        guard !parsed.app.isEmpty else {
            throw .usage("run: --app is required: the app's identifier, such as com.example.memo")
        }
        guard !parsed.command.isEmpty else {
            throw .usage("no command given: put it after --, for example: sandboxed-run run --app \(parsed.app) -- /bin/sh")
        }
        return parsed
    }

    func execute() throws -> Never {
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
        request.workingDirectory = try workingDirectory.map { path throws(SandboxError) in try Picking.absolute(path) }
        request.compatibility = bestEffort ? .bestEffort : .hardRequirement
        if !allowedHosts.isEmpty { request.policy.allowedHosts = (request.policy.allowedHosts ?? []) + allowedHosts }
        if !resolved.isEmpty {
            guard let hosts = request.policy.allowedHosts.map(AllowedHosts.init) else {
                throw SandboxError.usage("--resolve takes effect with an allowed-hosts list only (--allow-host, \(Policy.allowedHostsKey))")
            }
            for name in resolved.keys.sorted() where !hosts.resolves(name) {
                throw SandboxError.usage("--resolve \(name): not an allowed host; --resolve says where an allowed name leads, never which are allowed")
            }
            request.egressResolver = .fixed(resolved)
        }
        request.terminal = .automatic  // a terminal among stdin/stdout/stderr: the command gets its own pty
        if explain { request.explainDenials = 2 }
        if let denialsLimit {
            guard denialsFile != nil else { throw SandboxError.usage("--denials-limit needs --denials FILE: it bounds that log") }
            request.denialLogBytes = try DenialLogLimit.byteLimit(denialsLimit)
        }
        if let denialsFile { request.denialLog = try DenialLog.open(
                try Picking.absolute(RawArguments.value(of: "--denials") ?? FilePath(denialsFile)) { SandboxError.usage("--denials \(denialsFile): \($0)") },
                trust: session.linkTrust()) }
        var resolved: [ResolvedGrant] = []
        var broker: GrantBroker?
        let staging = review || policy.reviewChanges
        if staging, view == .host {
            throw SandboxError.usage("--review (or \(Policy.reviewKey)) needs the private view: a staged folder is a clone shown in the folder's place, which the host view cannot do; drop --view host")
        }
        if !grants.isEmpty {
            let launchGrants = try Picking.launchGrants(
                session: session, app: request.app, policy: policy, onStale: onStale ?? (Picking.hasTerminal ? .prompt : .fail),
                onMissing: onMissing)
            broker = launchGrants.broker
            for spec in grants {
                let (name, file) = try LaunchGrants.parse(spec)
                let grant = try launchGrants.grant(name: name, bookmark: Picking.absolute(file))
                resolved.append(staging ? try launchGrants.stage(grant) : grant)
            }
        }
        if staging, !resolved.contains(where: { $0.staging != nil }) {
            Console.notice("--review: no read-write grant to stage; the command runs as without it")
        }
        for assignment in setEnvironment {
            guard let equals = assignment.firstIndex(of: "=") else {
                throw SandboxError.usage("--setenv '\(assignment)': write NAME=VALUE")
            }
            request.environment[String(assignment[..<equals])] = String(assignment[assignment.index(after: equals)...])
        }

        request.readOnlyMounts = !superviseMetadata
        request.view = view
        // The broker's socket only where the policy has a live-grant key
        // (ConfinementPlan decides); an open panel asks through --picker, else on the relayed terminal.
        request.liveGrants = .attach
        LaunchPhases.mark("request")
        // Catch termination signals from now on, forward them once the child exists.
        ConfinedProcess.holdTerminationSignals()
        let sandbox = try session.launch(
            request, grants: resolved, picker: picker.map(AskpassPicker.init(program:)), broker: broker,
            command: RawArguments.command() ?? command.map { Array($0.utf8) }, reviewing: staging
        ) { plan in
            if report || !plan.report.missing.isEmpty {
                Console.lines(plan.report.text.split(separator: "\n").map(String.init))
            }
        }
        let process = sandbox.process
        if let notice = process.viewNotice {
            Console.notice("the private view could not be built (\(notice)): running in the host view (--best-effort)")
        }
        if report {
            Console.error(process.view == .private
                ? "file-system view: private (only the container, the grants and the policy's system paths exist"
                    + (process.namespaces.contains(.network) ? "; a network namespace of its own, loopback only)" : ")")
                : "file-system view: host (every host path exists for stat; what the rules do not allow is refused)")
            Console.error(process.namespaces.contains(.readOnlyMounts)
                ? "metadata changes: native in the writable folders, refused elsewhere by read-only mounts (EROFS)"
                : "metadata changes: decided by the supervisor (EPERM outside the writable folders)")
            if let reparenting = sandbox.plan.reparentingSummary { Console.error(reparenting) }
        }
        sandbox.forwardSignals()
        let termination = try sandbox.wait()
        LaunchPhases.mark("command ran")
        LaunchPhases.report()
        if let line = process.denials?.finish(termination) {
            Console.error(line.hasSuffix(", not explained") ? line.dropLast(", not explained".count) + "; run with --explain to see them" : line)
        }
        if !sandbox.stagedGrants.isEmpty, let broker {
            // The command ran: its status stays the launcher's whatever the
            // review finds (a tree it made too deep to list must not turn
            // its exit 0 into sandboxed-run's 125).
            do {
                try EndOfRunReview.run(sandbox.stagedReviews(broker: broker), app: app)
            } catch {
                Console.error("--review: \(error); the changes stay staged (`sandboxed-run review list --app \(app)`)")
            }
        }
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

    static let fileExtensions = ["plist", "entitlements", "json"]

    /// What `--policy <TAB>` offers: the built-in names, then the folders and
    /// policy files at the path typed so far (the shell narrows them further).
    static func completions(_ typed: String) -> [String] {
        let names = Policy.builtinNames.filter { $0.hasPrefix(typed) }
        let slash = typed.lastIndex(of: "/")
        let folder = slash.map { String(typed[...$0]) } ?? ""
        let start = slash.map { String(typed[typed.index(after: $0)...]) } ?? typed
        guard let directory = opendir(folder.isEmpty ? "." : folder) else { return names }
        defer { closedir(directory) }
        var files: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard name != ".", name != "..", name.hasPrefix(start), start.hasPrefix(".") || !name.hasPrefix(".") else { continue }
            var status = stat()
            guard stat(folder + name, &status) == 0 else { continue }
            if status.st_mode & S_IFMT == S_IFDIR {
                files.append(folder + name + "/")
            } else if fileExtensions.contains(where: { name.hasSuffix("." + $0) }) {
                files.append(folder + name)
            }
        }
        return names + files.sorted()
    }
}

/// `--denials-limit`, parsed here: the option is the CLI's.
enum DenialLogLimit {
    /// `--denials-limit`: bytes, or a number with K, M or G (KiB, MiB, GiB),
    /// from `DenialReporter.minimumLogBytes` to 1 TiB; anything else is a usage error.
    static func byteLimit(_ text: String) throws(SandboxError) -> Int {
        let units: [Character: Int] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30]
        var digits = Substring(text)
        var unit = 1
        if let last = digits.last, let scale = units[last] {
            unit = scale
            digits = digits.dropLast()
        }
        let maximum = 1 << 40
        guard !digits.isEmpty, digits.count <= 13, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
              let number = Int(digits), number <= maximum / unit, number * unit >= DenialReporter.minimumLogBytes else {
            throw .usage("--denials-limit \(Printable.message(text)): give bytes, or a number with K, M or G (KiB, MiB, GiB), "
                + "from \(DenialReporter.minimumLogBytes) to 1024G; for example 16M")
        }
        return number * unit
    }
}
