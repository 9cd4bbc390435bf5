import Foundation
import Testing
@testable import Sandbox

/// The shipped policies grew to run real programs (#7); what they must never
/// open, even to a command whose uid is 0: a root command keeps its DAC
/// power over root-only files in any folder it may read.
@Suite struct ShippedPolicySecretsTests {
    static let policies = Policy.builtinNames

    /// Secrets that exist on this machine, plus a stand-in for another user's home.
    static func secrets(_ scratch: Scratch) -> [String] {
        let fixed = ["/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/sudoers", "/etc/ssl/private", "/root/.ssh", "/root"]
        let hostKeys = ((try? FileManager.default.contentsOfDirectory(atPath: "/etc/ssh")) ?? [])
            .filter { $0.hasSuffix("_key") }.map { "/etc/ssh/" + $0 }
        let homes = ((try? FileManager.default.contentsOfDirectory(atPath: "/home")) ?? []).map { "/home/" + $0 }
        let other = scratch.path + "/home/ada"
        try? FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: other + "/.netrc", contents: Data("machine x password y\n".utf8))
        chmod(other + "/.netrc", 0o600)
        return (fixed + hostKeys + homes + [other, other + "/.netrc"]).filter { FileManager.default.fileExists(atPath: $0) }
    }

    static let probe = """
        import os, sys
        for path in sys.argv[1:]:
            try:
                if os.path.isdir(path): os.listdir(path)
                else: open(path, 'rb').read(1)
                print(path, 'READ')
            except OSError as e:
                print(path, 'refused')
        """

    @Test(arguments: policies) func noSecretIsReadableAsRoot(policyName: String) throws {
        try #require(getuid() == 0, "this test proves the root case: run the suite as root")
        let scratch = Scratch()
        let secrets = Self.secrets(scratch)
        // Without the sandbox, root reads them all: the attack is real.
        let bare = try Run.unconfined([Run.python, "-c", Self.probe] + secrets)
        #expect(bare.output.allSatisfy { $0.hasSuffix(" READ") }, "\(bare.output)")
        let policy = try #require(Policy.builtin(named: policyName))
        let confined = try Run.confined([Run.python, "-c", Self.probe] + secrets, in: scratch, policy: policy)
        #expect(confined.output == secrets.map { "\($0) refused" }, "\(confined.stderr)")
    }

    /// Every file beneath the read-only paths of every shipped policy (the
    /// /etc files, /var/cache/man, the certificates) is readable by anyone
    /// anyway: adding a folder that holds a secret fails here.
    @Test(arguments: policies) func everyReadOnlyPathHoldsOnlyWorldReadableFiles(policyName: String) throws {
        let policy = try #require(Policy.builtin(named: policyName))
        var private_: [String] = []
        for systemPath in policy.systemPaths where systemPath.path.hasPrefix("/etc/") || systemPath.access == .readOnly {
            var queue = [systemPath.path]
            while let path = queue.popLast() {
                var status = stat()
                guard stat(path, &status) == 0 else { continue }  // absent here, or a dangling link
                if status.st_mode & S_IROTH == 0 { private_.append(path) }
                if status.st_mode & S_IFMT == S_IFDIR, let names = try? FileManager.default.contentsOfDirectory(atPath: path) {
                    queue += names.map { path + "/" + $0 }
                }
            }
        }
        #expect(private_.isEmpty, "not world-readable, yet in policy \(policyName): \(private_)")
    }
}
