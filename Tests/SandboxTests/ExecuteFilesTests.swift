import Foundation
import SystemPackage
import Testing
@testable import Sandbox

/// `org.sandboxed-run.files.execute`: whether the command may execute files
/// in its container and grants. Off when absent and in every shipped policy
/// but `developer`; never a right in the policy's other folders (its
/// read-write system paths, the sandbox's own /dev/shm).
@Suite struct ExecuteFilesTests {
    static let key = "org.sandboxed-run.files.execute"

    // MARK: The key

    @Test func theShippedPoliciesButDeveloperExecuteNothingOfTheirs() throws {
        for name in Policy.builtinNames {
            let policy = try #require(Policy.builtin(named: name))
            #expect(policy.executeFiles == (name == "developer"), "\(name)")
        }
    }

    @Test func theKeyIsReadFromEveryForm() throws {
        for flag in [true, false] {
            let xml = "<plist><dict><key>\(Self.key)</key><\(flag)/></dict></plist>"
            #expect(try Policy(data: Array(xml.utf8), source: "x").executeFiles == flag)
            let json = #"{"\#(Self.key)": \#(flag)}"#
            #expect(try Policy(data: Array(json.utf8), source: "j").executeFiles == flag)
            let binary = try Converted.python(
                "import plistlib, sys; sys.stdout.buffer.write(plistlib.dumps({'\(Self.key)': \(flag ? "True" : "False")}, fmt=plistlib.FMT_BINARY))")
            #expect(try Policy(data: binary, source: "b").executeFiles == flag)
        }
        #expect(try Policy(data: Array("{}".utf8), source: "j").executeFiles == false)
    }

    /// Only a boolean: a string "true", a 1 or a list is a mistake to name,
    /// in whichever form the policy was written.
    @Test(arguments: [
        (#"{"org.sandboxed-run.files.execute": "true"}"#, "found string 'true'"),
        (#"{"org.sandboxed-run.files.execute": 1}"#, "found integer 1"),
        (#"{"org.sandboxed-run.files.execute": 1e300}"#, "found a real number"),
        (#"{"org.sandboxed-run.files.execute": null}"#, "found null"),
        (#"{"org.sandboxed-run.files.execute": [true]}"#, "found an array"),
        (#"{"org.sandboxed-run.files.execute": {"grants": true}}"#, "found a dictionary"),
        ("<plist><dict><key>org.sandboxed-run.files.execute</key><string>YES</string></dict></plist>", "found string 'YES'"),
        ("<plist><dict><key>org.sandboxed-run.files.execute</key><integer>1</integer></dict></plist>", "found integer 1"),
        ("<plist><dict><key>org.sandboxed-run.files.execute</key><date>2024-01-01T00:00:00Z</date></dict></plist>", "found a date"),
    ])
    func aValueThatIsNotABooleanIsRefused(text: String, problem: String) throws {
        var forms: [(String, [UInt8])] = [("as written", Array(text.utf8))]
        if text.hasPrefix("<plist>") { forms += try Converted.forms(of: Array(text.utf8)).filter { $0.0 == "binary" } }
        for (form, bytes) in forms {
            do {
                let policy = try Policy(data: bytes, source: "p")
                Issue.record("\(form): accepted as \(policy.executeFiles)")
            } catch {
                #expect(error.key == Self.key, "\(form)")
                #expect(error.description.contains("expected a boolean"), "\(form): \(error)")
                #expect(error.description.contains(problem), "\(form): \(error)")
            }
        }
    }

    @Test func aMistypedKeyIsRefused() {
        #expect(throws: PolicyError.self) {
            try Policy(data: Array(#"{"org.sandboxed-run.files.executes": true}"#.utf8), source: "p")
        }
    }

    // MARK: In the command

    /// A copy of /bin/true in each kind of folder the command can write or
    /// was given, run by the command: 0, or 126 (EACCES from execve).
    static func runCopies(policy: Policy) throws -> [String] {
        let scratch = Scratch()
        let vault = scratch.path + "/vault"
        let shelf = scratch.path + "/shelf"
        let system = scratch.path + "/system"
        for folder in [vault, shelf, system] { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) }
        // The user's own tool in a folder granted read-only.
        try FileManager.default.copyItem(atPath: "/bin/true", toPath: shelf + "/t")
        var policy = policy
        policy.systemPaths.append(Policy.SystemPath(path: system, access: .readWrite))
        let script = """
            try() { cp /bin/true "$1/t" 2>/dev/null; "$1/t"; echo "$2 $?"; }
            try "$HOME" container
            try "$1" grant
            "$2/t"; echo "read-only-grant $?"
            try "$3" system-read-write
            try /dev/shm shm
            """
        let outcome = try Run.confined(["/bin/sh", "-c", script, "sh", vault, shelf, system], in: scratch, policy: policy) {
            $0.folders = [
                PathRule(grant: "VAULT", path: FilePath(vault), descriptor: try! ConfinementPlan.openVerified(vault), access: .readWrite),
                PathRule(grant: "SHELF", path: FilePath(shelf), descriptor: try! ConfinementPlan.openVerified(shelf), access: .readOnly),
            ]
        }
        #expect(outcome.termination == .exited(0), "\(outcome.stderr)")
        return outcome.output
    }

    @Test func withoutTheKeyNoFileOfTheCommandsFoldersRuns() throws {
        #expect(try Self.runCopies(policy: .defaultPolicy) == [
            "container 126", "grant 126", "read-only-grant 126", "system-read-write 126", "shm 126",
        ])
    }

    @Test func withTheKeyTheContainerAndTheGrantsRunNothingElse() throws {
        var policy = Policy.defaultPolicy
        policy.executeFiles = true
        #expect(try Self.runCopies(policy: policy) == [
            "container 0", "grant 0", "read-only-grant 0", "system-read-write 126", "shm 126",
        ])
    }

    /// The right adds no power: no_new_privs makes the kernel ignore set-id
    /// bits, so a set-uid-root program in a grant (the user's, or one a root
    /// command left there) runs as the command's user. Unconfined, the same
    /// file makes uid 65534 root.
    @Test(.enabled(if: getuid() == 0, "needs root to make a set-uid-root file and to become uid 65534"))
    func aSetUIDProgramInAGrantRunsWithoutItsOwnersPowers() throws {
        let home = Launcher.Home(owner: 65534)
        let vault = home.path + "/vault"
        try FileManager.default.createDirectory(atPath: vault, withIntermediateDirectories: true)
        #expect(chown(vault, 65534, 65534) == 0)
        try FileManager.default.copyItem(atPath: "/usr/bin/id", toPath: vault + "/id")
        #expect(chown(vault + "/id", 0, 0) == 0 && chmod(vault + "/id", 0o6755) == 0)
        // id names the effective ids only where they differ from the real ones.
        let bare = try Launcher.program(Launcher.setpriv(65534) + [vault + "/id"], environment: home.environment)
        #expect(bare.stdout.contains(" euid=0(root) egid=0(root) "), "the set-id bits work outside: \(bare.stdout) \(bare.stderr)")
        let picked = try Launcher.program(
            Launcher.setpriv(65534) + [Launcher.binary, "pick", "--app", "com.example.setid", "--select", vault, "-o", home.path + "/v.bookmark"],
            environment: home.environment)
        try #require(picked.status == 0, "\(picked.stderr)")
        let confined = try Launcher.run([vault + "/id"], home: home, app: "com.example.setid", as: 65534,
                                        options: ["--policy", "developer", "--grant", "V=\(home.path)/v.bookmark"])
        #expect(confined.status == 0, "\(confined.stderr)")
        #expect(confined.stdout.hasPrefix("uid=65534(nobody) gid=65534(nogroup) "), "\(confined.stdout)")
        #expect(!confined.stdout.contains("euid") && !confined.stdout.contains("egid"), "\(confined.stdout)")
    }
}
