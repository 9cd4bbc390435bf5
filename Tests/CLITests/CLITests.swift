import Foundation
import Testing

/// The `sandboxed-run` binary as users run it.
enum CLI {
    /// Built next to the test bundle by `swift build` / `swift test`.
    static let binary: String = {
        // SANDBOXED_RUN_UNDER_TEST: another build, e.g. scripts/build-release's static one.
        if let other = ProcessInfo.processInfo.environment["SANDBOXED_RUN_UNDER_TEST"] { return other }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
        return URL(fileURLWithPath: exe).deletingLastPathComponent().appendingPathComponent("sandboxed-run").path
    }()

    struct Result {
        let status: Int32
        let stdout: String
        let stderr: String
    }

    final class Home {
        // Not in /tmp, which the private view replaces by the sandbox's own.
        let path = "/var/tmp/sandboxed-run-cli-" + UUID().uuidString
        init() { try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(atPath: path) }
        var environment: [String: String] {
            ["XDG_DATA_HOME": path + "/data", "XDG_STATE_HOME": path + "/state", "XDG_RUNTIME_DIR": path + "/run", "HOME": path, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"]
        }
    }

    /// Waits (20 s at most) until the command made `ready`, or ended.
    static func waitUntilReady(_ ready: String, _ process: Process) {
        var waited = 0
        while !FileManager.default.fileExists(atPath: ready) && process.isRunning && waited < 400 {
            usleep(50_000)
            waited += 1
        }
    }

    static func start(_ arguments: [String], home: Home) throws -> (Process, Pipe, Pipe) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        process.environment = home.environment
        process.currentDirectoryURL = URL(fileURLWithPath: home.path)
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        return (process, out, err)
    }

    /// Any program, unconfined: for the host side of a test.
    static func program(_ path: String, _ arguments: [String], environment: [String: String]? = nil) throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        if let environment { process.environment = environment }
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let (stdout, stderr) = try readOutputs(out, err)
        process.waitUntilExit()
        return Result(status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
    }

    static func run(_ arguments: [String], home: Home = Home()) throws -> Result {
        let (process, out, err) = try start(arguments, home: home)
        let (stdout, stderr) = try readOutputs(out, err)
        process.waitUntilExit()
        let status = process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
        return Result(status: status, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
    }
}

/// Reading a child's output in the tests' shared process. Foundation's
/// `readDataToEndOfFile()` traps on a read error, ending every test at once;
/// `readToEnd()` throws, failing one. And stdout and stderr are read
/// together: read one after the other, a child that fills the second pipe
/// (64 KiB) while the first is waited on never ends.
extension FileHandle {
    /// Everything until end of file.
    func readAll() throws -> Data { try readToEnd() ?? Data() }
}

/// The child's stdout and stderr, each to its end, read at the same time.
func readOutputs(_ out: Pipe, _ err: Pipe) throws -> (stdout: Data, stderr: Data) {
    final class Reading: @unchecked Sendable {
        var result: Result<Data, any Error> = .success(Data())
        let done = DispatchSemaphore(value: 0)
    }
    let reading = Reading()
    let errors = err.fileHandleForReading
    Thread {
        reading.result = Result { try errors.readAll() }
        reading.done.signal()
    }.start()
    let stdout = Result { try out.fileHandleForReading.readAll() }
    // A failed stdout read stops reading it: the child gets EPIPE rather than wait for us.
    if case .failure = stdout { try? out.fileHandleForReading.close() }
    reading.done.wait()  // the thread must not outlive `err`, whose descriptor is then closed
    return (try stdout.get(), try reading.result.get())
}

/// The harness itself: a child that writes more to stderr than a pipe holds
/// (64 KiB) before it ends its stdout completes. Read one after the other,
/// stdout first, it waited on us while we waited on it; `timeout` turns that
/// into a failure (status 137 after 20 s) instead of a hung test run.
@Suite struct HarnessTests {
    static let loud = "head -c 204800 /dev/zero | tr '\\0' e >&2; echo out"

    @Test func aProgramFillingStderrBeforeStdoutCompletes() throws {
        let result = try CLI.program("/usr/bin/timeout", ["-s", "KILL", "20", "/bin/sh", "-c", Self.loud])
        #expect(result.status == 0 && result.stdout == "out\n", "\(result.status) \(result.stdout)")
        #expect(result.stderr.utf8.count == 204800 && result.stderr.allSatisfy { $0 == "e" })
    }

    @Test func aConfinedCommandFillingStderrBeforeStdoutCompletes() throws {
        let result = try CLI.run(["run", "--app", "com.example.cli", "--", "/usr/bin/timeout", "-s", "KILL", "20", "/bin/sh", "-c", Self.loud])
        #expect(result.status == 0 && result.stdout == "out\n", "\(result.status) \(result.stdout)")
        #expect(result.stderr.utf8.count == 204800)
    }
}

@Suite struct RunExitCodeTests {
    @Test func theCommandsStatusIsTheLaunchersStatus() throws {
        let result = try CLI.run(["run", "--app", "com.example.cli", "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 7"])
        #expect(result.status == 7)
        #expect(result.stdout == "out\n")
        #expect(result.stderr == "err\n")
    }

    /// A mistyped security option must stop the launch (exit 125, naming the
    /// word), never be dropped or become the command: `--polciy read-only`
    /// once ran the command under the writer policy with exit 0.
    @Test func anUnknownOptionBeforeTheCommandStopsTheLaunch() throws {
        let home = CLI.Home()
        let marker = home.path + "/ran"
        let command = ["/bin/sh", "-c", "touch \(marker)"]
        for arguments in [
            ["run", "--app", "com.example.cli", "--polciy", "read-only", "--"] + command,
            ["run", "--app", "com.example.cli", "--polciy=read-only", "--"] + command,
            ["run", "--polciy", "read-only", "--app", "com.example.cli", "--"] + command,
            ["run", "--app", "com.example.cli", "--report", "-x", "--"] + command,
            ["run", "--app", "com.example.cli", "--polciy", "read-only"] + command,
        ] {
            let result = try CLI.run(arguments, home: home)
            #expect(result.status == 125, "\(arguments): \(result)")
            #expect(result.stderr.contains("unknown option '--polciy") || result.stderr.contains("unknown option '-x'"), "\(result.stderr)")
            #expect(!FileManager.default.fileExists(atPath: marker), "\(arguments) ran the command")
        }
        // A security option given twice is not silently the second one.
        for arguments in [
            ["run", "--app", "com.example.cli", "--policy", "read-only", "--policy", "writer", "--"] + command,
            ["run", "--policy=read-only", "--app", "com.example.cli", "--policy", "writer"] + command,
        ] {
            let twice = try CLI.run(arguments, home: home)
            #expect(twice.status == 125 && twice.stderr.contains("--policy given twice"), "\(arguments): \(twice)")
        }
        // Help is help, wherever it is asked for.
        for arguments in [["run", "--app", "x", "--help", "--"] + command, ["run", "--app", "x", "-h"]] {
            let help = try CLI.run(arguments, home: home)
            #expect(help.status == 0 && help.stdout.contains("OVERVIEW: Run a command confined"), "\(arguments): \(help)")
        }
        let stray = try CLI.run(["run", "--app", "com.example.cli", "extra", "--"] + command, home: home)
        #expect(stray.status == 125 && stray.stderr.contains("unexpected argument 'extra'"), "\(stray)")
        #expect(!FileManager.default.fileExists(atPath: marker))
        // Options after -- belong to the command, and a command without -- still runs.
        let passed = try CLI.run(["run", "--app", "com.example.cli", "--", "/bin/echo", "--polciy"], home: home)
        #expect(passed.status == 0 && passed.stdout == "--polciy\n", "\(passed)")
        let bare = try CLI.run(["run", "--app", "com.example.cli", "/bin/echo", "ok"], home: home)
        #expect(bare.status == 0 && bare.stdout == "ok\n", "\(bare)")
    }

    /// SANDBOXED_RUN_PHASES=1: each launch phase's microseconds on stderr, after the command.
    @Test func launchPhasesArePrintedOnlyWhenAsked() throws {
        let home = CLI.Home()
        let arguments = ["run", "--app", "com.example.cli", "--", "/bin/sh", "-c", "echo out; echo err >&2"]
        let quiet = try CLI.run(arguments, home: home)
        #expect(quiet.stderr == "err\n")
        var environment = home.environment
        environment["SANDBOXED_RUN_PHASES"] = "1"
        let timed = try CLI.program(CLI.binary, arguments, environment: environment)
        #expect(timed.status == 0 && timed.stdout == "out\n")
        let lines = timed.stderr.split(separator: "\n").map(String.init)
        #expect(lines.first == "err")
        let phases = lines.dropFirst().map { $0.split(separator: " ") }
        #expect(phases.allSatisfy { $0.first == "phase" && Int($0.last ?? "") != nil })
        let names = phases.map { $0.dropFirst().dropLast().joined(separator: " ") }
        for name in ["policy", "seccomp filters", "keeper forked", "child confined", "command started", "command ran"] {
            #expect(names.contains(name), "\(name)")
        }
    }

    /// The command gets LANG and TERM from the launcher's environment, a
    /// variable named by --keep-env, and nothing else of it.
    @Test func onlyTheKeptVariablesReachTheCommand() throws {
        let home = CLI.Home()
        var environment = home.environment
        environment["TERM"] = "vt220"
        environment["LANG"] = "C"
        environment["SECRET_TOKEN"] = "hunter2"
        environment["OTHER_TOKEN"] = "swordfish"
        let show = ["/bin/sh", "-c", "echo \"$LANG $TERM ${SECRET_TOKEN:-unset} ${OTHER_TOKEN:-unset}\""]
        let plain = try CLI.program(CLI.binary, ["run", "--app", "com.example.cli", "--"] + show, environment: environment)
        #expect(plain.status == 0 && plain.stdout == "C vt220 unset unset\n", "\(plain)")
        let kept = try CLI.program(CLI.binary, ["run", "--app", "com.example.cli", "--keep-env", "SECRET_TOKEN", "--keep-env=UNSET_NAME", "--"] + show, environment: environment)
        #expect(kept.status == 0 && kept.stdout == "C vt220 hunter2 unset\n", "\(kept)")
    }

    /// Ignored signals survive exec: a launcher started with some ignored
    /// (`nohup`, `trap ''`, even the two glibc keeps for itself, 32 and 33,
    /// which its `sigaction` refuses to change) must not pass that on, nor
    /// its blocked mask.
    @Test func theCommandStartsWithDefaultSignalsWhateverTheLauncherIgnored() throws {
        let home = CLI.Home()
        let launcher = """
            import ctypes, os, signal, sys
            libc = ctypes.CDLL(None, use_errno=True)
            ignore = (ctypes.c_ulong * 4)(1, 0, 0, 0)  # handler SIG_IGN, flags, restorer, mask
            for signo in (32, 33):
                assert libc.syscall(\(Self.rtSigaction), signo, ignore, None, 8) == 0
            for signo in (signal.SIGHUP, signal.SIGINT, signal.SIGPIPE, signal.SIGUSR1, signal.SIGTERM):
                signal.signal(signo, signal.SIG_IGN)
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2, signal.SIGWINCH])
            os.execv(sys.argv[1], sys.argv[1:])
            """
        let result = try CLI.program(
            "/usr/bin/python3", ["-c", launcher, CLI.binary, "run", "--app", "com.example.cli", "--",
                                 "/bin/grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"], environment: home.environment)
        #expect(result.status == 0 && result.stdout == "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n", "\(result)")
    }

    /// rt_sigaction's number.
    static let rtSigaction: Int = {
        #if arch(x86_64)
        13
        #else
        134  // arm64, and every architecture with the generic table
        #endif
    }()

    @Test func deathBySignalIs128PlusN() throws {
        #expect(try CLI.run(["run", "--app", "com.example.cli", "--", "/bin/sh", "-c", "kill -KILL $$"]).status == 137)
    }

    @Test func aMissingCommandIs127() throws {
        let result = try CLI.run(["run", "--app", "com.example.cli", "--", "no-such-tool"])
        #expect(result.status == 127)
        #expect(result.stderr == "sandboxed-run: command not found: no-such-tool. Give a path, or a name found in the sandbox's PATH (/usr/local/bin:/usr/bin:/bin).\n")
    }

    @Test func aCommandTheSandboxMayNotExecuteIs126() throws {
        let home = CLI.Home()
        let tool = home.path + "/tool"
        try FileManager.default.copyItem(atPath: "/bin/true", toPath: tool)
        let result = try CLI.run(["run", "--app", "com.example.cli", "--view", "host", "--", tool], home: home)
        #expect(result.status == 126)
        #expect(result.stderr.hasPrefix("sandboxed-run: cannot execute \(tool): permission denied."))
        // In the private view the tool is not there at all: the same status, and why.
        let hidden = try CLI.run(["run", "--app", "com.example.cli", "--", tool], home: home)
        #expect(hidden.status == 126)
        #expect(hidden.stderr.hasPrefix("sandboxed-run: cannot execute \(tool): it is not in the sandbox's private view"), "\(hidden.stderr)")
        // A name the host lacks too stays "not found".
        #expect(try CLI.run(["run", "--app", "com.example.cli", "--", home.path + "/absent"], home: home).status == 127)
    }

    @Test(arguments: [
        (["run", "--app", "../escape", "--", "/bin/true"], "invalid app id '../escape'"),
        (["run", "--app", "a", "--policy", "/no/such/policy.plist", "--", "/bin/true"], "policy /no/such/policy.plist: its folder does not exist"),
        (["run", "--app", "a", "--setenv", "NOVALUE", "--", "/bin/true"], "--setenv 'NOVALUE': write NAME=VALUE"),
        (["run", "--app", "a", "--keep-fd", "917", "--", "/bin/true"], "--keep-fd 917: that descriptor is not open"),
        // Numbers the launcher itself has open by the time it launches (the
        // container, system paths, libraries): never handed over.
        (["run", "--app", "a", "--keep-fd", "5", "--", "/bin/true"], "--keep-fd 5: that descriptor is not open"),
        (["run", "--app", "a", "--keep-fd", "9", "--", "/bin/true"], "--keep-fd 9: that descriptor is not open"),
    ])
    func aBadValueIs125WithOneClearLine(arguments: [String], message: String) throws {
        let result = try CLI.run(arguments)
        #expect(result.status == 125)
        #expect(result.stderr.hasPrefix("sandboxed-run: "))
        #expect(result.stderr.contains(message), "\(result.stderr)")
        #expect(result.stderr.filter { $0 == "\n" }.count == 1, "one line: \(result.stderr)")
    }

    /// Every usage error alike, whoever parsed it (ArgumentParser, `run`'s
    /// own parser, a check in a command's body): the problem and the
    /// command's own usage on one line, where its help is on a second.
    @Test(arguments: [
        (["frobnicate"], "", "unexpected argument 'frobnicate'", "sandboxed-run <subcommand>"),
        (["version"], "", "unexpected argument 'version'", "sandboxed-run <subcommand>"),
        (["run", "--", "/bin/true"], " run", "run: --app is required: the app's identifier, such as com.example.memo", "sandboxed-run run [<options>] --app <app> [<command> ...]"),
        (["run", "--app", "a"], " run", "run: no command given: put it after --, for example: sandboxed-run run --app a -- /bin/sh", "sandboxed-run run [<options>] --app <app> [<command> ...]"),
        (["run", "--bogus"], " run", "run: unknown option '--bogus'", "sandboxed-run run [<options>] --app <app> [<command> ...]"),
        (["grants", "revoke"], " grants revoke", "grants revoke: give exactly one of --grant, --app or --folder",
         "sandboxed-run grants revoke [--grant <grant>] [--app <app>] [--folder <folder>] [--end-holders] [--keep-holders]"),
        (["grants", "revoke", "--grant", "a", "--app", "b"], " grants revoke", "grants revoke: give exactly one of --grant, --app or --folder",
         "sandboxed-run grants revoke [--grant <grant>] [--app <app>] [--folder <folder>] [--end-holders] [--keep-holders]"),
        (["grants", "list", "--bogus"], " grants list", "grants list: unknown option '--bogus'", "sandboxed-run grants list [--app <app>] [--json]"),
        (["pick", "--app", "a"], " pick", "pick: missing expected argument '--output <output>'",
         "sandboxed-run pick --app <app> [--read-only] --output <output> [--select <select>]"),
    ])
    func aUsageErrorIsOneLineWithItsUsageAndOneSayingWhereHelpIs(arguments: [String], command: String, problem: String, usage: String) throws {
        let result = try CLI.run(arguments)
        #expect(result.status == 125)
        #expect(result.stdout.isEmpty)
        #expect(result.stderr == "sandboxed-run: \(problem) (usage: \(usage))\nsandboxed-run: see `sandboxed-run\(command) --help`\n", "\(result.stderr)")
    }

    @Test func aBadPolicyFileNamesTheFileAndKey() throws {
        let home = CLI.Home()
        let policy = home.path + "/bad.plist"
        try #"{"com.apple.security.network.client": "sure"}"#.write(toFile: policy, atomically: true, encoding: .utf8)
        let result = try CLI.run(["run", "--app", "a", "--policy", policy, "--", "/bin/true"], home: home)
        #expect(result.status == 125)
        #expect(result.stderr == "sandboxed-run: policy \(policy): key 'com.apple.security.network.client': expected a boolean (<true/> or <false/>), found string 'sure'\n")
    }

    @Test func anEntitlementsFileRunsWithWarningsForUnknownKeys() throws {
        let home = CLI.Home()
        let policy = home.path + "/App.entitlements"
        try """
            <?xml version="1.0" encoding="UTF-8"?>
            <plist version="1.0"><dict>
            <key>com.apple.security.app-sandbox</key><true/>
            <key>com.apple.security.get-task-allow</key><true/>
            </dict></plist>
            """.write(toFile: policy, atomically: true, encoding: .utf8)
        // An entitlements file names no system paths, so only a static program could run;
        // the warning and a clean refusal to exec are what we check.
        let result = try CLI.run(["run", "--app", "a", "--policy", policy, "--", "/bin/true"], home: home)
        #expect(result.stderr.contains("warning: policy \(policy): ignoring com.apple.security.get-task-allow"))
        #expect(result.status == 126)
    }

    @Test func reportSaysWhatIsEnforced() throws {
        let result = try CLI.run(["run", "--app", "a", "--report", "--", "/bin/true"])
        #expect(result.status == 0)
        #expect(result.stderr.contains("enforced: seccomp-bpf syscall allow-list"))
        #expect(!result.stderr.contains("NOT ENFORCED"))
    }

    @Test func helpIsNotAnError() throws {
        let result = try CLI.run(["run", "--help"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("--best-effort"))
    }
}

@Suite struct SignalForwardingTests {
    @Test(arguments: [SIGTERM, SIGINT, SIGHUP])
    func aSignalToTheLauncherReachesTheCommand(signal: Int32) throws {
        let home = CLI.Home()
        let marker = "started"
        let (process, out, _) = try CLI.start(
            ["run", "--app", "a", "--", "/bin/sh", "-c", "echo \(marker); exec /bin/sleep 30"], home: home)
        // Wait until the command runs: the launcher forwards from then on.
        #expect(String(decoding: out.fileHandleForReading.availableData, as: UTF8.self) == "\(marker)\n")
        let sent = Date()
        kill(process.processIdentifier, signal)
        process.waitUntilExit()
        #expect(process.terminationReason == .exit)
        #expect(process.terminationStatus == 128 + signal)
        #expect(Date().timeIntervalSince(sent) < 10)
    }
}

/// The host pid of the process whose argument list is exactly `arguments`.
func hostProcess(running arguments: [String]) -> pid_t? {
    let wanted = Data(arguments.joined(separator: "\0").utf8) + Data([0])
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
    return entries.compactMap { pid_t($0) }.first { FileManager.default.contents(atPath: "/proc/\($0)/cmdline") == wanted }
}

@Suite struct ParentDeathTests {
    @Test func killingTheLauncherKillsTheCommand() throws {
        let home = CLI.Home()
        let marker = "30.\(UInt32.random(in: 1000...999_999))"
        let (process, out, _) = try CLI.start(["run", "--app", "a", "--", "/bin/sh", "-c", "echo started; exec /bin/sleep \(marker)"], home: home)
        #expect(String(decoding: out.fileHandleForReading.availableData, as: UTF8.self) == "started\n")
        // The command's own $$ is its pid in the sandbox's namespace: find it as the host sees it.
        var found: pid_t?
        for _ in 0..<100 where found == nil {
            found = hostProcess(running: ["/bin/sleep", marker])
            if found == nil { Thread.sleep(forTimeInterval: 0.05) }
        }
        let child = try #require(found)
        #expect(kill(child, 0) == 0)
        kill(process.processIdentifier, SIGKILL)  // no chance to forward anything
        process.waitUntilExit()
        var gone = false
        for _ in 0..<100 where !gone {
            gone = kill(child, 0) != 0 || (try? String(contentsOfFile: "/proc/\(child)/stat", encoding: .utf8))?.contains(") Z ") == true
            if !gone { Thread.sleep(forTimeInterval: 0.05) }
        }
        #expect(gone, "the command outlived its launcher")
        kill(child, SIGKILL)
    }
}

@Suite struct KeeperWithoutSignalScopeTests {
    /// Below Landlock ABI 6 the keeper has no signal scope; as pid 1 of the
    /// sandbox's pid namespace it must still end every process at once. It
    /// used to look for its children in /proc, and where the kernel refused
    /// the namespace's own procfs (as inside containers with masked /proc
    /// paths) the host's /proc named them by host pids, which never matched
    /// its pid of 1: it found nothing, waited a second, and left the orphans
    /// to the namespace's teardown (found by this round's attacker review).
    /// Here a seccomp filter makes Landlock unavailable and refuses the proc
    /// and shm mounts (both MS_NOEXEC), as such a machine would.
    @Test(.enabled(if: getuid() == 0 && Self.isX86_64, "root: the keeper gets a pid namespace without a user namespace; x86-64 syscall numbers"))
    func orphansEndAtOnceInThePidNamespaceWithoutProcOrSignalScope() throws {
        let home = CLI.Home()
        let wrapper = """
            import ctypes, os, struct, sys
            def stmt(code, k, jt=0, jf=0): return struct.pack("HBBI", code, jt, jf, k)
            LD_ABS, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
            ALLOW, ERRNO = 0x7FFF0000, 0x00050000
            program = b"".join([
                stmt(LD_ABS, 0),                                   # nr
                stmt(JEQ, 444, 0, 1), stmt(RET, ERRNO | 38),       # landlock_create_ruleset: ENOSYS
                stmt(JEQ, 165, 0, 3),                              # mount
                stmt(LD_ABS, 40),                                  # its flags
                stmt(JSET, 8, 0, 1), stmt(RET, ERRNO | 1),         # MS_NOEXEC: EPERM
                stmt(RET, ALLOW),
            ])
            buffer = ctypes.create_string_buffer(program)
            class Program(ctypes.Structure):
                _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
            libc = ctypes.CDLL(None, use_errno=True)
            assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
            assert libc.prctl(22, 2, ctypes.byref(Program(len(program) // 8, ctypes.addressof(buffer))), 0, 0) == 0
            os.execv(sys.argv[1], sys.argv[1:])
            """
        let started = Date()
        let result = try CLI.program(
            "/usr/bin/python3", ["-c", wrapper, CLI.binary, "run", "--best-effort", "--app", "com.example.cli", "--",
                                 "/bin/sh", "-c", "for i in 1 2 3; do setsid /bin/sh -c '/bin/sleep 60 &'; done; echo launched"],
            environment: home.environment)
        let elapsed = Date().timeIntervalSince(started)
        #expect(result.status == 0 && result.stdout == "launched\n", "\(result)")
        #expect(result.stderr.contains("NOT ENFORCED"), "Landlock was not made unavailable: \(result.stderr)")
        #expect(elapsed < 0.8, "the keeper took \(elapsed) s to end the orphans")
    }

    static let isX86_64: Bool = {
        #if arch(x86_64)
        true
        #else
        false
        #endif
    }()
}

@Suite struct ContainerCommandTests {
    @Test func pathIsStableAndReinstallMovesIt() throws {
        let home = CLI.Home()
        let first = try CLI.run(["container", "path", "--app", "com.example.memo"], home: home)
        let again = try CLI.run(["container", "path", "--app", "com.example.memo"], home: home)
        #expect(first.status == 0)
        #expect(first.stdout == again.stdout)
        #expect(first.stdout.hasPrefix(home.path + "/data/sandboxed-run/containers/com.example.memo/"))
        let moved = try CLI.run(["container", "reinstall", "--app", "com.example.memo"], home: home)
        #expect(moved.status == 0)
        #expect(moved.stdout != first.stdout)
        #expect(!FileManager.default.fileExists(atPath: first.stdout.trimmingCharacters(in: .newlines)))
    }
}

@Suite struct DoctorTests {
    @Test func doctorReportsTheKernelAndEveryPolicy() throws {
        let result = try CLI.run(["doctor"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("Landlock ABI: "))
        for name in ["writer", "read-only", "networked", "developer"] {
            #expect(result.stdout.contains("policy builtin:\(name):"))
        }
    }
}

/// A record is bytes, not a path: `//` and a trailing `/` stay as given.
@Suite struct AppendRecordBytesTests {
    @Test func theRecordIsWrittenExactlyAsGiven() throws {
        let home = CLI.Home()
        for record in ["a//b/ x/", "/", "//", "C:\\\\x\\\\", "tail/"] {
            let note = home.path + "/note-\(record.utf8.count).md"
            let result = try CLI.run(["append", note, record], home: home)
            #expect(result.status == 0, "\(result)")
            #expect(try String(contentsOfFile: note, encoding: .utf8) == record + "\n")
        }
    }
}
