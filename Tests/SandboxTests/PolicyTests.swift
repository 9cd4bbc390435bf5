import Foundation
import Testing
@testable import Sandbox
import Policies

@Suite struct PolicyTests {
    @Test func builtinPoliciesLoadWithoutWarnings() throws {
        for (name, _) in BuiltinPolicies.all {
            let policy = try #require(Policy.builtin(named: name))
            #expect(policy.warnings.isEmpty, "\(name)")
            #expect(policy.systemPaths.contains { $0.path == "/usr" && $0.access == .readExecute })
            #expect(!policy.systemPaths.contains { $0.path == "/etc" }, "all of /etc would expose /etc/shadow to a root child")
        }
        #expect(Policy.defaultPolicy.userSelectedAccess == .readWrite)
        #expect(Policy.builtin(named: "read-only")?.userSelectedAccess == .readOnly)
        #expect(Policy.builtin(named: "networked")?.networkClient == true)
    }

    @Test func embeddedPoliciesAreTheFilesInPolicies() throws {
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../Policies")
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".plist") }
        #expect(Set(files) == Set(Policy.builtinNames.map { $0 + ".plist" }))
        #expect(BuiltinPolicies.all.map(\.name) == Policy.builtinNames)
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
        (#"{"org.sandboxed-run.syscalls.allow": ["clone"]}"#, "org.sandboxed-run.syscalls.allow", "never be allowed whole"),
        (#"{"org.sandboxed-run.syscalls.allow": ["socket"]}"#, "org.sandboxed-run.syscalls.allow", "never be allowed whole"),
        (#"{"org.sandboxed-run.syscalls.allow": ["socketpair"]}"#, "org.sandboxed-run.syscalls.allow", "never be allowed whole"),
        (#"{"org.sandboxed-run.syscalls.allow": ["memfd_create"]}"#, "org.sandboxed-run.syscalls.allow", "never be allowed whole"),
        (#"{"org.sandboxed-run.syscalls.allow": ["prlimit64"]}"#, "org.sandboxed-run.syscalls.allow", "never be allowed whole"),
        (#"{"org.sandboxed-run.syscalls.allow": ["personality"]}"#, "org.sandboxed-run.syscalls.allow", "never be allowed whole"),
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

    /// A policy that lists a syscall the filter allows only with certain
    /// arguments got it whole: its unconditional rule came first. Built in
    /// code (no loader to refuse it), it must change nothing.
    @Test func extraSyscallsCannotWidenArgumentRules() throws {
        var policy = Policy.defaultPolicy
        policy.extraSyscalls = ["socket", "clone", "memfd_create", "prlimit64", "socketpair", "ptrace", "chmod"]
        let scratch = Scratch()
        let listening = scratch.path + "/host.sock"
        let server = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(server) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (index, byte) in listening.utf8.enumerated() { buffer[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(server, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(bound == 0 && listen(server, 1) == 0)
        let code = Attack.prelude + """
            import socket
            def unix():
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(sys.argv[1])
            attempt("AF_UNIX to a host socket", unix)
            report("clone(CLONE_NEWUSER)", libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0))
            report("memfd_create without NOEXEC_SEAL", libc.syscall(319, b"x", 1))
            report("prlimit64 of pid 1", libc.syscall(302, 1, 7, None, None))
            """
        let output = try Run.confined([Run.python, "-c", code, listening], in: scratch, policy: policy).output
        #expect(output == [
            "AF_UNIX to a host socket \(Views.outside("EACCES"))", "clone(CLONE_NEWUSER) EPERM", "memfd_create without NOEXEC_SEAL EACCES",
            "prlimit64 of pid 1 ENOSYS",
        ])
        // And the filter is the one built without them.
        let plain = SyscallFilter.Options()
        let withExtras = SyscallFilter.Options(extraSyscalls: policy.extraSyscalls)
        #expect(try SyscallFilter(options: withExtras).compile() == SyscallFilter(options: plain).compile())
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
