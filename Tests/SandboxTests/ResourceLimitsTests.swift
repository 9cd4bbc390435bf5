import Foundation
import Testing
@_spi(Fuzzing) @testable import Sandbox
import Policies

/// `org.sandboxed-run.limits`: what each inherited limit lets a confined
/// command do to the host or the user's other processes, without the policy's
/// limit and with it. The limits are set soft and hard, so the command cannot
/// raise them back.
@Suite struct ResourceLimitsTests {
    static func policy(_ limits: [ResourceLimit: UInt64]) -> Policy {
        var policy = Policy.defaultPolicy
        policy.limits = limits
        return policy
    }

    static func hardLimit(_ resource: Int32) -> UInt64 {
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(UInt32(resource)), &limit)
        return UInt64(limit.rlim_max)
    }

    // MARK: The key

    @Test func theShippedPoliciesSetEveryLimit() throws {
        for name in Policy.builtinNames {
            let policy = try #require(Policy.builtin(named: name))
            #expect(policy.limits == [.core: 0, .memlock: 8 << 20, .nice: 0, .nproc: 1024, .rtprio: 0], "\(name)")
        }
    }

    @Test func limitsAreReadFromEveryFormat() throws {
        let xml = #"<plist><dict><key>org.sandboxed-run.limits</key><dict><key>core</key><integer>0</integer>"#
            + #"<key>memlock</key><real>65536</real></dict></dict></plist>"#
        #expect(try Policy(data: Array(xml.utf8), source: "x").limits == [.core: 0, .memlock: 65536])
        let json = #"{"org.sandboxed-run.limits": {"nproc": 10, "rtprio": 0}}"#
        #expect(try Policy(data: Array(json.utf8), source: "j").limits == [.nproc: 10, .rtprio: 0])
        let binary = try Converted.python(
            "import plistlib, sys; sys.stdout.buffer.write(plistlib.dumps({'org.sandboxed-run.limits': {'nice': 0, 'core': 2**63 - 1}}, fmt=plistlib.FMT_BINARY))")
        #expect(try Policy(data: binary, source: "b").limits == [.nice: 0, .core: UInt64(Int.max)])
    }

    @Test(arguments: [
        (#"{"core": 1e300}"#, "'core' should be an integer from 0 to 9223372036854775807, found a real number"),
        (#"{"core": -1}"#, "'core' should be an integer from 0"),
        (#"{"core": 1.5}"#, "found a real number"),
        (#"{"core": "0"}"#, "found string '0'"),
        (#"{"core": true}"#, "found boolean true"),
        (#"{"core": null}"#, "found null"),
        (#"{"stack": 1}"#, "unknown limit 'stack'; the limits are core, memlock, nice, nproc, rtprio"),
        (#"{"RLIMIT_CORE": 0}"#, "unknown limit 'RLIMIT_CORE'"),
        (#"[0]"#, "expected a dictionary of limit names and integers, found an array"),
        (#"5"#, "expected a dictionary of limit names and integers, found integer 5"),
    ])
    func badLimitsAreRefused(value: String, problem: String) {
        let json = #"{"org.sandboxed-run.limits": "# + value + "}"
        do {
            _ = try Policy(data: Array(json.utf8), source: "p.json")
            Issue.record("\(value) was accepted")
        } catch {
            #expect(error.key == "org.sandboxed-run.limits")
            #expect(error.description.contains(problem), "\(error)")
        }
    }

    /// The report says what holds: for a launcher whose real uid is 0 the
    /// kernel never applies nproc, and the report says so, without stopping
    /// the launch (the attacker review found it claimed as enforced).
    @Test func reportNamesTheLimits() {
        let report = EnforcementReport(features: KernelFeatures.probe(), policy: .defaultPolicy)
        if getuid() == 0 {
            #expect(report.text.contains("enforced: resource limits (soft and hard, never above the launcher's): "
                + "core 0, memlock 8388608, nice 0, rtprio 0"), "\(report.text)")
            #expect(report.text.contains("NOT APPLIED: process count (nproc 1024) (not applied: the kernel exempts uid 0"), "\(report.text)")
            #expect(!report.text.contains("nproc +1024"))
            #expect(report.missing.isEmpty, "a root launch is not stopped for it")
        } else {
            #expect(report.text.contains("enforced: resource limits (soft and hard, never above the launcher's): "
                + "core 0, memlock 8388608, nice 0, nproc +1024, rtprio 0"), "\(report.text)")
        }
    }

    // MARK: In the command

    /// Core dumps: the kernel writes one where kernel.core_pattern says (here
    /// "core": the command's working folder; a pipe there would start a helper
    /// as root outside the sandbox). Without the limit the command raises its
    /// soft limit to the inherited hard one and dumps; with it, it cannot.
    @Test func aConfinedCommandCannotDumpCore() throws {
        let code = """
            import os, resource
            hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
            if hard != resource.RLIM_INFINITY:
                hard = max(hard, 1 << 30)
            try:
                resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
                print("raised", hard, flush=True)
            except (ValueError, OSError) as error:
                print("refused", resource.getrlimit(resource.RLIMIT_CORE), flush=True)
            os.chdir(os.environ["HOME"])
            os.abort()
            """
        let pattern = (try? String(contentsOfFile: "/proc/sys/kernel/core_pattern", encoding: .utf8)) ?? ""
        func dumps(_ scratch: Scratch) -> [String] {
            let found = FileManager.default.enumerator(atPath: scratch.containers)?.compactMap { $0 as? String } ?? []
            return found.filter { ($0 as NSString).lastPathComponent.hasPrefix("core") }
        }
        if Self.hardLimit(4) > 0, pattern.hasPrefix("core") {
            let open = Scratch()
            let raised = try Run.confinedPython(code, in: open, policy: Self.policy([:]))
            #expect(raised.stdout.hasPrefix("raised"), "\(raised)")
            #expect(!dumps(open).isEmpty, "no core dump without the limit: \(raised)")
        }
        let scratch = Scratch()
        let limited = try Run.confinedPython(code, in: scratch)
        #expect(limited.stdout == "refused (0, 0)\n", "\(limited)")
        #expect(limited.termination == .signaled(SIGABRT))
        #expect(dumps(scratch).isEmpty)
    }

    /// mlock pins memory the host cannot reclaim; capabilities are dropped,
    /// so RLIMIT_MEMLOCK is all that bounds it.
    @Test func lockedMemoryIsCapped() throws {
        let code = """
            import ctypes, mmap, resource
            libc = ctypes.CDLL(None, use_errno=True)
            print(resource.getrlimit(resource.RLIMIT_MEMLOCK))
            for size in (32 << 10, 1 << 20):
                buffer = mmap.mmap(-1, size)
                address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
                print(size, libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(size)), ctypes.get_errno())
            try:
                resource.setrlimit(resource.RLIMIT_MEMLOCK, (1 << 20, 1 << 20))
                print("raised")
            except (ValueError, OSError):
                print("refused")
            """
        #expect(Self.hardLimit(8) >= 1 << 20, "the runner's own limit is below a megabyte")
        let open = try Run.confinedPython(code, in: Scratch(), policy: Self.policy([:]))
        #expect(open.output.count > 2 && open.output[2] == "1048576 0 0", "\(open)")
        let limited = try Run.confinedPython(code, in: Scratch(), policy: Self.policy([.memlock: 64 << 10]))
        #expect(limited.output == ["(65536, 65536)", "32768 0 0", "1048576 -1 \(ENOMEM)", "refused"], "\(limited)")
    }

    /// SCHED_FIFO/RR on itself is what the argument guard leaves a command
    /// (pid 0 only); with no CAP_SYS_NICE only RLIMIT_RTPRIO stands between a
    /// spinning real-time process and every other process on its CPU.
    @Test func realTimeSchedulingAndHigherPriorityAreRefused() throws {
        let code = """
            import os, resource
            print(resource.getrlimit(resource.RLIMIT_RTPRIO), resource.getrlimit(resource.RLIMIT_NICE))
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
                print("fifo")
            except OSError as error:
                print("fifo refused", error.errno)
            try:
                os.setpriority(os.PRIO_PROCESS, 0, -5)
                print("nice -5")
            except OSError as error:
                print("nice refused", error.errno)
            """
        let limited = try Run.confinedPython(code, in: Scratch())
        #expect(limited.output == ["(0, 0) (0, 0)", "fifo refused \(EPERM)", "nice refused \(EACCES)"], "\(limited)")
    }

    /// The harm itself needs an inherited hard RLIMIT_RTPRIO above 0 (an audio
    /// group's limits.conf, say); raising it needs CAP_SYS_RESOURCE.
    @Test(.enabled(if: hardLimit(14) > 0, "the runner's hard RLIMIT_RTPRIO is 0: nothing to inherit"))
    func withoutTheLimitACommandTakesRealTimePriority() throws {
        let code = """
            import os, resource
            hard = resource.getrlimit(resource.RLIMIT_RTPRIO)[1]
            resource.setrlimit(resource.RLIMIT_RTPRIO, (hard, hard))
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
            print(os.sched_getscheduler(0) == os.SCHED_FIFO)
            """
        let open = try Run.confinedPython(code, in: Scratch(), policy: Self.policy([:]))
        #expect(open.stdout == "True\n", "\(open)")
    }

    /// RLIMIT_NPROC counts every process and thread of the real uid, system
    /// wide; the policy's value is added to the user's count at launch
    /// (for a launcher whose real uid is not 0: the kernel exempts root).
    @Test func processesCountFromTheUsersOwn() throws {
        let code = """
            import resource
            print(*resource.getrlimit(resource.RLIMIT_NPROC))
            try:
                resource.setrlimit(resource.RLIMIT_NPROC, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
                print("raised")
            except (ValueError, OSError):
                print("refused")
            """
        let before = ConfinementPlan.tasksOfUser(getuid())
        let outcome = try Run.confinedPython(code, in: Scratch())
        let after = ConfinementPlan.tasksOfUser(getuid())
        let fields = outcome.output.first?.split(separator: " ").compactMap { UInt64($0) } ?? []
        #expect(fields.count == 2 && fields[0] == fields[1], "\(outcome)")
        let limit = fields.first ?? 0
        if getuid() == 0 {
            // The kernel never applies it to root: nothing is counted, the value is set as it is.
            #expect(limit == 1024, "\(limit)")
        } else {
            // Other tests run alongside: the base lies between the two counts, with room for their threads.
            #expect(limit >= 1024 + min(before, after) / 2 && limit <= 1024 + max(before, after) * 2, "\(limit), \(before)...\(after)")
        }
        #expect(outcome.output.last == "refused")
    }

    /// A fork bomb as an unprivileged user: the kernel stops it at the limit
    /// (root is exempt: the kernel does not apply RLIMIT_NPROC to uid 0).
    @Test(.enabled(if: getuid() == 0, "needs root to become uid 65534 with setpriv"))
    func anUnprivilegedForkBombStopsAtTheLimit() throws {
        let home = Launcher.Home(owner: 65534)
        chmod(home.path, 0o755)
        let policy = home.path + "/nproc.plist"
        let writer = try #require(BuiltinPolicies.all.first { $0.name == "writer" })
        let text = String(decoding: writer.plist, as: UTF8.self).replacingOccurrences(of: "<integer>1024</integer>", with: "<integer>40</integer>")
        try text.write(toFile: policy, atomically: true, encoding: .utf8)
        let bomb = """
            import os, time
            count = 0
            for _ in range(400):
                try:
                    if os.fork() == 0:
                        time.sleep(30)
                        os._exit(0)
                    count += 1
                except OSError:
                    break
            print(count)
            """
        let result = try Launcher.program(
            Launcher.setpriv(65534) + [Launcher.binary, "run", "--app", "com.example.nproc", "--policy", policy, "--", Run.python, "-c", bomb],
            environment: home.environment, directory: home.path)
        let started = Int(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
        #expect(started >= 10 && started < 120, "\(result)")
        print("fork bomb as uid 65534 with nproc 40 started \(started) processes")
    }
}
