import Foundation
import Testing
@testable import Sandbox
import Policies

@Suite struct PolicyTests {
    @Test func builtinPoliciesLoadWithoutWarnings() throws {
        for (name, _) in BuiltinPolicies.all {
            let policy = try #require(try Policy.builtin(named: name))
            #expect(policy.warnings.isEmpty, "\(name)")
            #expect(policy.systemPaths.contains { $0.path == "/usr" && $0.access == .readExecute })
            #expect(!policy.systemPaths.contains { $0.path == "/etc" }, "all of /etc would expose /etc/shadow to a root child")
        }
        #expect(Policy.defaultPolicy.userSelectedAccess == .readWrite)
        #expect(try Policy.builtin(named: "read-only")?.userSelectedAccess == .readOnly)
        #expect(try Policy.builtin(named: "networked")?.networkClient == true)
    }

    @Test func embeddedPoliciesAreTheFilesInPolicies() throws {
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../Policies")
        for (name, bytes) in BuiltinPolicies.all {
            let file = try Data(contentsOf: folder.appendingPathComponent("\(name).plist"))
            #expect(Array(file) == bytes, "\(name)")
        }
    }

    @Test func aMacOSEntitlementsFileIsAcceptedAsIs() throws {
        let entitlements = """
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0">
            <dict>
                <key>com.apple.security.app-sandbox</key><true/>
                <key>com.apple.security.files.user-selected.read-only</key><true/>
                <key>com.apple.security.network.client</key><true/>
                <key>com.apple.security.cs.allow-jit</key><true/>
                <key>com.apple.security.application-groups</key><array><string>TEAM.group</string></array>
            </dict>
            </plist>
            """
        let policy = try Policy(data: Array(entitlements.utf8), source: "App.entitlements")
        #expect(policy.userSelectedAccess == .readOnly)
        #expect(policy.networkClient)
        #expect(policy.warnings == [
            "ignoring com.apple.security.application-groups: sandboxed-run has no equivalent",
            "ignoring com.apple.security.cs.allow-jit: sandboxed-run has no equivalent",
        ])
    }

    @Test func jsonWithTheSameKeysIsAccepted() throws {
        let json = #"{"com.apple.security.app-sandbox": true, "org.sandboxed-run.system-paths.read-only": ["/usr/share"]}"#
        let policy = try Policy(data: Array(json.utf8), source: "p.json")
        #expect(policy.systemPaths == [.init(path: "/usr/share", access: .readOnly)])
    }

    @Test(arguments: [
        (#"{"com.apple.security.app-sandbox": "yes"}"#, "com.apple.security.app-sandbox", "expected a boolean"),
        (#"{"com.apple.security.app-sandbox": false}"#, "com.apple.security.app-sandbox", "always sandboxes"),
        (#"{"org.sandboxed-run.policy-version": 2}"#, "org.sandboxed-run.policy-version", "not supported"),
        (#"{"org.sandboxed-run.system-path.read-only": []}"#, "org.sandboxed-run.system-path.read-only", "unknown key"),
        (#"{"org.sandboxed-run.system-paths.read-only": ["etc"]}"#, "org.sandboxed-run.system-paths.read-only", "absolute path"),
        (#"{"org.sandboxed-run.system-paths.read-only": ["/usr/../etc"]}"#, "org.sandboxed-run.system-paths.read-only", "without '..'"),
        (#"{"org.sandboxed-run.system-paths.read-write": [7]}"#, "org.sandboxed-run.system-paths.read-write", "should be a string"),
        (#"{"org.sandboxed-run.syscalls.allow": ["ptrace"]}"#, "org.sandboxed-run.syscalls.allow", "can never be allowed"),
        (#"{"org.sandboxed-run.syscalls.allow": ["chmod"]}"#, "org.sandboxed-run.syscalls.allow", "can never be allowed"),
        (#"{"org.sandboxed-run.syscalls.allow": ["frobnicate"]}"#, "org.sandboxed-run.syscalls.allow", "not a syscall"),
        (#"{"org.sandboxed-run.network.tcp-connect-ports": [443]}"#, "org.sandboxed-run.network.tcp-connect-ports", "needs com.apple.security.network.client"),
        (#"{"com.apple.security.network.client": true, "org.sandboxed-run.network.tcp-connect-ports": [0]}"#, "org.sandboxed-run.network.tcp-connect-ports", "port number"),
    ])
    func badPoliciesNameTheKeyAndTheProblem(json: String, key: String, problem: String) {
        do {
            _ = try Policy(data: Array(json.utf8), source: "bad.json")
            Issue.record("accepted \(json)")
        } catch {
            #expect(error.file == "bad.json")
            #expect(error.key == key)
            #expect(error.description.contains(problem), "\(error.description)")
        }
    }

    @Test func garbageIsRefusedWithAHint() {
        #expect(throws: PolicyError.self) { try Policy(data: [0xFF, 0x00, 0x12], source: "junk") }
        do {
            _ = try Policy(data: Array("<plist><array/></plist>".utf8), source: "list.plist")
        } catch {
            #expect(error.key == nil)
            #expect(error.description.contains("Policies/"))
        }
    }

    @Test func extraSyscallsReachTheFilter() throws {
        // A syscall outside the allow-list fails with ENOSYS until the policy asks for it.
        var policy = Policy.defaultPolicy
        let code = Attack.prelude + "report('mincore-like acct', libc.syscall(163, None))"  // acct(NULL)
        #expect(try Run.confinedPython(code, in: Scratch(), policy: policy).output == ["mincore-like acct ENOSYS"])
        policy.extraSyscalls = ["acct"]
        // acct needs CAP_SYS_PACCT, which the sandbox never has: now the kernel answers.
        #expect(try Run.confinedPython(code, in: Scratch(), policy: policy).output == ["mincore-like acct EPERM"])
    }
}

@Suite struct AppIDTests {
    @Test(arguments: ["com.example.memo", "a", "A-b_c.9"])
    func goodIDs(_ id: String) throws {
        #expect(try AppID(id).rawValue == id)
    }

    @Test(arguments: ["", ".hidden", "../escape", "a/b", "with space", "ü", String(repeating: "a", count: 256)])
    func badIDs(_ id: String) {
        #expect(throws: SandboxError.self) { try AppID(id) }
    }
}
