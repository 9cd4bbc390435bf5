import CLaunch
import Foundation
import Testing
@testable import Sandbox

/// Fail closed: a protection the kernel cannot give stops the launch,
/// unless the caller asks for best effort, and then the report is honest.
@Suite struct CompatibilityTests {
    func request(_ scratch: Scratch, _ command: [String], _ level: CompatibilityLevel) throws -> LaunchRequest {
        var request = LaunchRequest(
            app: try AppID("com.example.compat"), policy: .defaultPolicy, command: command,
            containerBase: scratch.containers, protectedFolders: [scratch.containers], hostEnvironment: [:])
        request.compatibility = level
        request.privateNamespaces = false  // an old kernel: no pid namespace to hide other processes either
        request.view = .host  // nor a private view, which is built in the namespaces
        return request
    }

    static let abi3 = KernelFeatures(landlockABI: 3, seccompFilter: true, seccompUserNotification: true)

    @Test func anOldLandlockIsRefusedByDefault() throws {
        let hard = try request(Scratch(), ["/bin/true"], .hardRequirement)
        do throws(SandboxError) {
            _ = try ConfinementPlan(hard, features: Self.abi3)
            Issue.record("launched without the protections the policy needs")
        } catch {
            guard case .protectionUnavailable(let missing) = error else { Issue.record("\(error)"); return }
            #expect(missing.count == 3)
            #expect(missing.contains { $0.hasPrefix("ioctl on devices") })
            #expect(missing.contains { $0.contains("needs Landlock ABI 6") })
            #expect(error.exitCode == 125)
            // The library names what is missing; the CLI adds how to run anyway (--best-effort).
            #expect(!error.description.contains("--"))
        }
    }

    @Test func bestEffortRunsAndTheReportIsHonest() throws {
        let scratch = Scratch()
        let sleeper = Process()
        sleeper.executableURL = URL(fileURLWithPath: "/bin/sleep")
        sleeper.arguments = ["30"]
        try sleeper.run()
        defer { kill(sleeper.processIdentifier, SIGKILL); sleeper.waitUntilExit() }
        let secret = scratch.file("secret.txt")
        let code = Attack.prelude + "attempt('read', lambda: open(sys.argv[1]).read())\nattempt('signal', lambda: os.kill(int(sys.argv[2]), 0))"
        let plan = try ConfinementPlan(
            request(scratch, [Run.python, "-c", code, secret, String(sleeper.processIdentifier)], .bestEffort), features: Self.abi3)
        #expect(plan.report.missing.map(\.name) == [
            "ioctl on devices", "signals and abstract unix sockets limited to the sandbox", "every process the command starts ends with it",
        ])
        #expect(plan.report.text.contains("NOT ENFORCED: signals"))
        let out = scratch.path + "/out"
        let fd = open(out, O_WRONLY | O_CREAT, 0o600)
        defer { close(fd) }
        var running = try request(scratch, [Run.python, "-c", code, secret, String(sleeper.processIdentifier)], .bestEffort)
        running.standardOutput = fd
        #expect(try ConfinementPlan(running, features: Self.abi3).launch().wait() == .exited(0))
        // Files are still confined at ABI 3; signals, as reported, are not.
        #expect(try String(contentsOfFile: out, encoding: .utf8) == "read EACCES\nsignal ok\n")
    }

    @Test func withoutUserNotificationMetadataChangesAreRefusedEverywhere() throws {
        let scratch = Scratch()
        let features = KernelFeatures(landlockABI: 7, seccompFilter: true, seccompUserNotification: false)
        #expect(throws: SandboxError.self) {
            try ConfinementPlan(request(scratch, ["/bin/true"], .hardRequirement), features: features)
        }
        let out = scratch.path + "/out"
        let fd = open(out, O_WRONLY | O_CREAT, 0o600)
        defer { close(fd) }
        var running = try request(scratch, ["/bin/sh", "-c", "touch Documents/f && chmod 600 Documents/f; echo $?"], .bestEffort)
        running.standardOutput = fd
        running.standardError = fd
        _ = try ConfinementPlan(running, features: features).launch().wait()
        #expect(try String(contentsOfFile: out, encoding: .utf8).hasSuffix("Operation not permitted\n1\n"))
    }

    @Test func withoutLandlockTheReportSaysFilesAreOpen() throws {
        let features = KernelFeatures(landlockABI: 0, seccompFilter: true, seccompUserNotification: true)
        let plan = try ConfinementPlan(request(Scratch(), ["/bin/true"], .bestEffort), features: features)
        #expect(plan.report.missing.first?.detail.contains("every file the user can reach is open") == true)
        #expect(try plan.launch().wait() == .exited(0))
    }
}

/// Every stage the child or the keeper can fail at has a name in C
/// (csb_stage_name), beside the stages: a failure is never "child stage 17".
@Suite struct StageNameTests {
    @Test func everyStageHasAName() {
        let child: ClosedRange<Int32> = Int32(CSB_STAGE_SIGNALS.rawValue)...Int32(CSB_STAGE_LIMITS.rawValue)
        let keeper: ClosedRange<Int32> = Int32(CSB_KEEPER_RUNNING.rawValue)...Int32(CSB_KEEPER_PTY_TERMINAL.rawValue)
        let stages: [Int32] = Array(child) + Array(keeper)
        for stage in stages {
            #expect(csb_stage_name(stage) != nil, "stage \(stage) has no name")
        }
        #expect(csb_stage_name(0) == nil && csb_stage_name(99) == nil)
    }
}
