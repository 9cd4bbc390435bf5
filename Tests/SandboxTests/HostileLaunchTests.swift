import Foundation
import Testing
import SystemPackage
@testable import Sandbox

/// What the launcher is asked to set up: rules that would reach past the
/// sandbox's own folders are refused before anything runs.
@Suite(.inBothViews) struct HostileLaunchTests {
    /// A system path that holds the broker's state hands the sandbox its keys.
    @Test func aSystemPathHoldingAProtectedFolderIsRefused() throws {
        let scratch = Scratch()
        let state = scratch.path + "/state/sandboxed-run"
        try FileManager.default.createDirectory(atPath: state + "/keys", withIntermediateDirectories: true)
        try "sealing key\n".write(toFile: state + "/keys/current", atomically: true, encoding: .utf8)
        var policy = Policy.defaultPolicy
        policy.systemPaths.append(.init(path: scratch.path + "/state", access: .readOnly))

        // Without the check, the attack works: the command reads the key.
        let exposed = try Run.confined(["/bin/cat", state + "/keys/current"], in: scratch, policy: policy)
        #expect(exposed.stdout == "sealing key\n")

        #expect(throws: SandboxError.self) {
            try Run.confined(["/bin/cat", state + "/keys/current"], in: scratch, policy: policy) { $0.protectedFolders = [state] }
        }
        // Inside the protected folder is refused as well as above it.
        var inside = Policy.defaultPolicy
        inside.systemPaths.append(.init(path: state + "/keys", access: .readOnly))
        #expect(throws: SandboxError.self) {
            try Run.confined(["/bin/true"], in: scratch, policy: inside) { $0.protectedFolders = [state] }
        }
        // A file inside it, named directly or through a link as the last name (its folder is then another).
        #expect(symlink(state + "/keys/current", scratch.path + "/innocent-file") == 0)
        for file in [state + "/keys/current", scratch.path + "/innocent-file"] {
            var single = Policy.defaultPolicy
            single.systemPaths.append(.init(path: file, access: .readOnly))
            let exposedFile = try Run.confined(["/bin/cat", state + "/keys/current"], in: scratch, policy: single)
            #expect(exposedFile.stdout == "sealing key\n")
            #expect(throws: SandboxError.self) {
                try Run.confined(["/bin/cat", state + "/keys/current"], in: scratch, policy: single) { $0.protectedFolders = [state] }
            }
        }
    }

    /// A granted folder is checked the same way, by inode: a symlink changes nothing.
    @Test func aGrantHoldingAProtectedFolderIsRefused() throws {
        let scratch = Scratch()
        let state = scratch.path + "/vault/.state"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        #expect(symlink(scratch.path + "/vault", scratch.path + "/innocent") == 0)
        let fd = try ConfinementPlan.openVerified(scratch.path + "/innocent")
        #expect(throws: SandboxError.self) {
            try Run.confined(["/bin/true"], in: scratch) {
                $0.folders = [PathRule(grant: "VAULT", path: FilePath(scratch.path + "/innocent"), descriptor: fd, access: .readWrite)]
                $0.protectedFolders = [state]
            }
        }
    }

    @Test func theWorkingDirectoryMustBeReachableAndIsTheOneChecked() throws {
        let scratch = Scratch()
        #expect(throws: SandboxError.self) {
            try Run.confined(["/bin/pwd"], in: scratch) { $0.workingDirectory = scratch.path }
        }
        let inside = try Run.confined(["bin/sh", "-c", "pwd"], in: scratch) { $0.workingDirectory = "/usr" }
        #expect(inside.stdout == "/usr\n")
    }
}

@Suite struct PrintableTests {
    @Test func invisibleAndReorderingCharactersAreShown() {
        for (raw, shown) in [("a\u{61C}b", #"a\u{61c}b"#), ("a\u{2028}b", #"a\u{2028}b"#), ("a\u{200B}b", #"a\u{200b}b"#),
                             ("a\u{FEFF}b", #"a\u{feff}b"#), ("a\u{3164}b", #"a\u{3164}b"#), ("a\u{202E}b", #"a\u{202e}b"#),
                             ("a\u{85}b", #"a\u{85}b"#), ("tab\there", #"tab\there"#), ("back\\slash", #"back\\slash"#),
                             ("café ✓", "café ✓")] {
            #expect(Printable.path(raw) == shown, "\(raw.debugDescription)")
        }
        #expect(Printable.path(bytes: [0x63, 0x61, 0x66, 0xE9]) == #"caf\xe9"#)
        #expect(Printable.path(String(repeating: "x", count: 10), limit: 4) == "xxxx…")
    }
}
