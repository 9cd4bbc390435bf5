import Foundation
import Testing

/// `scripts/install`, into a scratch PREFIX (never the real /usr/local):
/// `man` finds the pages by the names users type, and bash, with
/// bash-completion, loads the completion from where it looks and offers
/// the built-in policies for `run --policy `.
@Suite struct InstallTests {
    static let script = ManualTests.repository.appendingPathComponent("scripts/install").path

    final class Scratch {
        let path = NSTemporaryDirectory() + "sandboxed-run-install-" + UUID().uuidString
        init() throws { try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(atPath: path) }
    }

    /// Installs the binary under test (no release build) into `prefix`, staged under `destdir`.
    static func install(prefix: String, destdir: String? = nil) throws -> CLI.Result {
        var environment = ProcessInfo.processInfo.environment
        environment["DESTDIR"] = destdir
        environment["SANDBOXED_RUN_BINARY"] = CLI.binary
        return try CLI.program(script, [prefix], environment: environment)
    }

    @Test func manFindsEachCommandsPageByItsDashedName() throws {
        let scratch = try Scratch()
        let prefix = scratch.path + "/prefix"
        let installed = try Self.install(prefix: prefix)
        try #require(installed.status == 0, "\(installed)")
        let manpath = ["MANPATH": prefix + "/share/man", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"]
        for (page, file) in [("sandboxed-run", "sandboxed-run.1"), ("sandboxed-run-run", "sandboxed-run.run.1"),
                             ("sandboxed-run-grants-revoke", "sandboxed-run.grants.revoke.1"),
                             ("sandboxed-run.grants.revoke", "sandboxed-run.grants.revoke.1")] {
            let found = try CLI.program("/usr/bin/man", ["-w", page], environment: manpath)
            #expect(found.status == 0, "man -w \(page): \(found)")
            // man -w names the page a link leads to.
            let path = found.stdout.trimmingCharacters(in: .newlines)
            #expect(path.hasPrefix(prefix + "/share/man/man1/"), "\(page): \(path)")
            #expect(URL(fileURLWithPath: path).resolvingSymlinksInPath().lastPathComponent == file, "\(page): \(path)")
        }
        let run = try CLI.program("/usr/bin/man", ["sandboxed-run-run"], environment: manpath.merging(["MANPAGER": "cat", "MANWIDTH": "80"]) { $1 })
        #expect(run.status == 0 && run.stdout.contains("sandboxed-run run"), "\(run)")
        #expect(run.stdout.contains("--policy"), "\(run.stdout.prefix(400))")
        for file in ["bin/sandboxed-run", "bin/sandboxed-run-desktop-picker", "share/bash-completion/completions/sandboxed-run",
                     "share/zsh/site-functions/_sandboxed-run", "share/fish/vendor_completions.d/sandboxed-run.fish"] {
            #expect(FileManager.default.fileExists(atPath: prefix + "/" + file), "\(file) not installed")
        }
        #expect(FileManager.default.isExecutableFile(atPath: prefix + "/bin/sandboxed-run"))
        #expect(FileManager.default.isExecutableFile(atPath: prefix + "/bin/sandboxed-run-desktop-picker"))
    }

    /// DESTDIR stages the install: everything lands under DESTDIR+PREFIX, the
    /// links among the pages are relative (they still hold once moved to PREFIX).
    @Test func destdirStagesUnderItAndNothingNamesIt() throws {
        let scratch = try Scratch()
        let stage = scratch.path + "/stage"
        let prefix = scratch.path + "/final"
        let installed = try Self.install(prefix: prefix, destdir: stage)
        try #require(installed.status == 0, "\(installed)")
        #expect(!FileManager.default.fileExists(atPath: prefix), "installed outside DESTDIR")
        let man1 = stage + prefix + "/share/man/man1"
        #expect(FileManager.default.fileExists(atPath: stage + prefix + "/bin/sandboxed-run"))
        let link = try FileManager.default.destinationOfSymbolicLink(atPath: man1 + "/sandboxed-run-run.1")
        #expect(link == "sandboxed-run.run.1")
        let relative = try CLI.program(Self.script, ["usr/local"], environment: ["SANDBOXED_RUN_BINARY": CLI.binary, "PATH": "/usr/bin:/bin"])
        #expect(relative.status != 0 && relative.stderr.contains("absolute"), "\(relative)")
    }

    /// Another user (uid 65534) plants a link under a stage in a shared
    /// folder (`stage/usr/bin` -> a folder they own), or a folder of their
    /// own: the install refuses, saying why, and writes nothing there.
    @Test(.enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv"), "needs root and setpriv"))
    func aStageAnotherUserPlantedIsRefused() throws {
        let scratch = try Scratch()
        let shared = scratch.path + "/tmp"
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o1777])
        let planted = try CLI.program("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "/bin/sh", "-c",
            "mkdir -p '\(shared)/stage/usr' '\(shared)/evil' '\(shared)/other/usr' && ln -s '\(shared)/evil' '\(shared)/stage/usr/bin'"])
        try #require(planted.status == 0, "\(planted)")
        let linked = try Self.install(prefix: "/usr", destdir: shared + "/stage")
        #expect(linked.status != 0, "\(linked)")
        #expect(linked.stderr.contains("refusing \(shared)/stage") && linked.stderr.contains("another user"), "\(linked)")
        #expect((try? FileManager.default.contentsOfDirectory(atPath: shared + "/evil")) == [], "installed through the link")
        // The link alone, in a stage of root's own: refused as a link.
        let own = scratch.path + "/own"
        try FileManager.default.createDirectory(atPath: own + "/usr", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: own + "/usr/bin", withDestinationPath: shared + "/evil")
        let link = try Self.install(prefix: "/usr", destdir: own)
        #expect(link.status != 0 && link.stderr.contains("refusing \(own)/usr/bin: it is a symbolic link"), "\(link)")
        #expect((try? FileManager.default.contentsOfDirectory(atPath: shared + "/evil")) == [], "installed through the link")
    }

    /// The user types `sandboxed-run run --policy <TAB>`: bash-completion
    /// loads the installed script from PREFIX/share (as it does from
    /// /usr/local/share by default), which asks the installed binary.
    @Test func bashCompletesRunPolicyWithTheBuiltInPoliciesAndPolicyFiles() throws {
        let scratch = try Scratch()
        let prefix = scratch.path + "/prefix"
        let installed = try Self.install(prefix: prefix)
        try #require(installed.status == 0, "\(installed)")
        let work = scratch.path + "/work"
        try FileManager.default.createDirectory(atPath: work + "/policies", withIntermediateDirectories: true)
        for file in ["policies/mine.plist", "app.entitlements", "notes.txt"] {
            _ = FileManager.default.createFile(atPath: work + "/" + file, contents: Data())
        }
        let complete = """
            source /usr/share/bash-completion/bash_completion
            cd "$1"
            _completion_loader sandboxed-run
            COMP_WORDS=(sandboxed-run run --policy "$2")
            COMP_CWORD=3
            COMP_LINE="sandboxed-run run --policy $2"
            COMP_POINT=${#COMP_LINE}
            COMPREPLY=()
            _sandboxed-run sandboxed-run "$2" --policy
            printf '%s\\n' "${COMPREPLY[@]}"
            """
        let environment = ["PATH": prefix + "/bin:/usr/bin:/bin", "XDG_DATA_DIRS": prefix + "/share", "HOME": scratch.path, "LANG": "C.UTF-8"]
        func offered(_ typed: String) throws -> [String] {
            let result = try CLI.program("/bin/bash", ["--norc", "--noprofile", "-c", complete, "complete", work, typed], environment: environment)
            #expect(result.status == 0, "\(result)")
            return result.stdout.split(separator: "\n").map(String.init)
        }
        let all = try offered("")
        for name in ["writer", "read-only", "networked", "developer", "app.entitlements", "policies/"] {
            #expect(all.contains(name), "\(name) not offered: \(all)")
        }
        #expect(!all.contains("notes.txt"), "\(all)")
        #expect(try offered("rea") == ["read-only"])
        #expect(try offered("policies/") == ["policies/mine.plist"])
    }
}
