import Foundation
import Testing

/// What a user may hand the launcher by mistake, and what the app may plant
/// for the launcher to trip over: each is refused with one clear line.
@Suite struct HostileInputCLITests {
    /// A policy that lists the home folder would give the sandbox the broker's
    /// keys and ledger (and every app's container) to read.
    @Test func aPolicyThatWouldExposeTheBrokersStateIsRefused() throws {
        let home = CLI.Home()
        for exposed in ["/", home.path, home.path + "/state/sandboxed-run/keys"] {
            try FileManager.default.createDirectory(atPath: home.path + "/state/sandboxed-run/keys", withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
            chmod(home.path + "/state/sandboxed-run", 0o700)
            let policy = home.path + "/wide.json"
            try #"{"org.sandboxed-run.system-paths.read-execute": ["/usr", "/bin", "/lib", "/lib64"], "org.sandboxed-run.system-paths.read-only": ["\#(exposed)"]}"#
                .write(toFile: policy, atomically: true, encoding: .utf8)
            let result = try CLI.run(["run", "--app", "a", "--policy", policy, "--", "/bin/true"], home: home)
            #expect(result.status == 125, "\(exposed): \(result.stderr)")
            #expect(result.stderr.contains("key 'org.sandboxed-run.system-paths.read-only': '\(exposed)' would expose sandboxed-run's own"), "\(result.stderr)")
        }
    }

    /// The same folder reached through two mounts: the state folder through
    /// a bind mount, the containers through the real path. A policy that
    /// lists the real parent of the containers is refused: each protected
    /// folder's ancestry is its own (a walker shared with the state folder
    /// remembered the bind mount's parent for the containers, and let it
    /// through). Root only: it makes the bind mount in a mount namespace
    /// of its own, which nothing outside sees.
    @Test(.enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare")))
    func aPolicyReachingTheContainersBesideABindMountOfTheirParentIsRefused() throws {
        let home = CLI.Home()
        let policy = home.path + "/policy.json"
        try #"{"org.sandboxed-run.system-paths.read-execute": ["/usr", "/bin", "/lib", "/lib64"], "org.sandboxed-run.system-paths.read-only": ["\#(home.path)/home"]}"#
            .write(toFile: policy, atomically: true, encoding: .utf8)
        let script = [
            "set -e",
            "mount --make-rprivate /",
            "mkdir -p \"$ROOT/home/real\" \"$ROOT/alias\"",
            "mount --bind \"$ROOT/home/real\" \"$ROOT/alias\"",
            "export XDG_STATE_HOME=\"$ROOT/alias/state\" XDG_DATA_HOME=\"$ROOT/home/real/data\"",
            "\"$LAUNCHER\" run --app com.example.victim -- /bin/true",
            "mkdir -p -m 700 \"$ROOT/alias/state/sandboxed-run\"",
            "test -d \"$ROOT/home/real/data/sandboxed-run/containers\"",
            "\"$LAUNCHER\" run --app com.example.evil --policy \"$POLICY\" -- /bin/true",
        ].joined(separator: "\n")
        var environment = home.environment
        environment["ROOT"] = home.path
        environment["LAUNCHER"] = CLI.binary
        environment["POLICY"] = policy
        let result = try CLI.program("/usr/bin/unshare", ["-m", "/bin/sh", "-c", script], environment: environment)
        #expect(result.status == 125, "\(result)")
        #expect(result.stderr.contains("'\(home.path)/home' would expose sandboxed-run's own \(home.path)/home/real/data/sandboxed-run"), "\(result.stderr)")
    }

    /// The app can write its container: a policy kept there is one it could rewrite.
    @Test func aPolicyFileTheAppCouldRewriteIsRefused() throws {
        let home = CLI.Home()
        let container = try CLI.run(["container", "path", "--app", "com.example.memo"], home: home).stdout
            .trimmingCharacters(in: .newlines)
        let policy = container + "/Library/policy.json"
        try #"{"com.apple.security.network.client": true}"#.write(toFile: policy, atomically: true, encoding: .utf8)
        let result = try CLI.run(["run", "--app", "com.example.memo", "--policy", policy, "--", "/bin/true"], home: home)
        #expect(result.status == 125)
        #expect(result.stderr.contains("inside a folder an app can write (an app container), so the policy could have been written by someone other than you"), "\(result.stderr)")
        // The same file outside the app's folders is fine.
        let outside = home.path + "/policy.json"
        #expect(link(policy, outside) == 0)
        #expect(try CLI.run(["run", "--app", "com.example.memo", "--policy", outside, "--", "/bin/true"], home: home).status == 125,
                "a hard link into the container is the same file")
        unlink(policy)
        let alone = try CLI.run(["run", "--app", "com.example.memo", "--policy", outside, "--", "/bin/true"], home: home)
        #expect(alone.status == 126 || alone.status == 0, "\(alone.stderr)")
        #expect(!alone.stderr.contains("rewrite its own policy"))
    }

    /// An app can delete the folder the user's shell is in. Relative paths
    /// then have nothing to start from: a clear refusal, never a path from
    /// `/` (`vault.bm` became `/vault.bm`) and never a crash.
    @Test func aDeletedWorkingDirectoryIsNeverReplacedByTheRoot() throws {
        let home = CLI.Home()
        let gone = home.path + "/gone"
        for arguments in [
            ["run", "--app", "a", "--policy", "writr", "--", "/bin/true"],
            ["run", "--app", "a", "--grant", "V=vault.bm", "--", "/bin/true"],
            ["run", "--app", "a", "--denials", "denials.jsonl", "--", "/bin/true"],
            ["run", "--app", "a", "--chdir", "sub", "--", "/bin/true"],
            ["pick", "--app", "a", "--select", home.path, "-o", "vault.bm"],
            ["append", "note.md", "x"],
        ] {
            let quoted = ([CLI.binary] + arguments).map { "'" + $0 + "'" }.joined(separator: " ")
            let result = try CLI.program("/bin/sh", ["-c", "mkdir \(gone) && cd \(gone) && rmdir \(gone) && exec \(quoted)"], environment: home.environment)
            #expect(result.status == 125, "\(arguments): \(result)")
            #expect(result.stderr.contains("working directory cannot be found"), "\(arguments): \(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: "/vault.bm") && !FileManager.default.fileExists(atPath: "/denials.jsonl"))
    }

    @Test func aWorkingDirectoryOutsideTheSandboxIsRefused() throws {
        let result = try CLI.run(["run", "--app", "a", "--chdir", "/etc", "--", "/bin/true"])
        #expect(result.status == 125)
        #expect(result.stderr.contains("--chdir /etc: not a folder the sandbox can reach"), "\(result.stderr)")
    }

    /// `venv/bin/python` or `./tool` is the command's, found from its working
    /// directory, not from wherever the launcher was started.
    @Test func aRelativeCommandIsFoundFromTheCommandsWorkingDirectory() throws {
        let result = try CLI.run(["run", "--app", "a", "--chdir", "/usr", "--", "bin/sh", "-c", "pwd"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "/usr\n")
        let missing = try CLI.run(["run", "--app", "a", "--chdir", "/usr", "--", "./no-such-tool"])
        #expect(missing.status == 127)
    }

    /// The command line is taken as it is: 100,000 arguments cost milliseconds
    /// (the argument parser took over two minutes).
    @Test func aLongCommandLineIsLinear() throws {
        let count = 100_000
        let started = Date()
        let result = try CLI.run(["run", "--app", "a", "--", "/bin/sh", "-c", "echo $#", "sh"] + (0..<count).map { "a\($0)" })
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "\(count)\n")
        #expect(Date().timeIntervalSince(started) < 10)
    }

    @Test func anEmptySelectionGrantsNothing() throws {
        let home = CLI.Home()
        let result = try CLI.run(["pick", "--app", "com.example.memo", "--select", "", "-o", home.path + "/v.bookmark"], home: home)
        #expect(result.status == 125)
        #expect(result.stderr.contains("an empty path would grant the current folder"))
        #expect(try CLI.run(["grants", "list"], home: home).stdout == "no grants\n")
    }

    /// A folder name is chosen by whoever made the folder, the app included.
    /// Printed raw, this one would retitle the terminal and forge a line.
    @Test func namesAreEscapedInEverythingPrintedForPeople() throws {
        let home = CLI.Home()
        let name = "notes\u{1B}]0;pwned\u{07}\nsandboxed-run: all good\u{202E}"
        let folder = home.path + "/" + name
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let picked = try CLI.run(["pick", "--app", "com.example.memo", "--select", folder, "-o", home.path + "/v.bookmark"], home: home)
        #expect(picked.status == 0, "\(picked.stderr)")
        let listed = try CLI.run(["grants", "list"], home: home)
        let moved = home.path + "/moved"
        #expect(rename(folder, moved) == 0)
        let resolved = try CLI.run(["resolve", "--app", "com.example.memo", home.path + "/v.bookmark"], home: home)
        #expect(resolved.status == 10)
        for output in [picked.stderr, listed.stdout, resolved.stdout] {
            #expect(!output.contains("\u{1B}") && !output.contains("\u{07}") && !output.contains("\u{202E}"), "\(output.debugDescription)")
            #expect(output.filter { $0 == "\n" }.count == 1, "one line: \(output.debugDescription)")
            #expect(output.contains(#"notes\x1b]0;pwned\x07\nsandboxed-run: all good\u{202e}"#), "\(output.debugDescription)")
        }
        // JSON stays exact: the name decodes back to the very bytes.
        let json = try CLI.run(["grants", "list", "--json"], home: home).stdout
        let records = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]]
        #expect(records?.first?["path"] as? String == folder)
    }
}

/// Bookmark files handed to the CLI: a FIFO, a device, a link the app planted.
@Suite struct HostileBookmarkFileCLITests {
    /// Runs the CLI, killing it after `seconds`: a hang is a failure, not a stuck suite.
    func runBounded(_ arguments: [String], home: CLI.Home, seconds: Double = 10) throws -> (CLI.Result, Bool) {
        let (process, out, err) = try CLI.start(arguments, home: home)
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        let hung = process.isRunning
        if hung { kill(process.processIdentifier, SIGKILL) }
        let (stdout, stderr) = try readOutputs(out, err)
        process.waitUntilExit()
        return (CLI.Result(status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self),
                           stderr: String(decoding: stderr, as: UTF8.self)), hung)
    }

    @Test func aFIFOAsABookmarkIsRefusedWithoutHanging() throws {
        let home = CLI.Home()
        let fifo = home.path + "/vault.bookmark"
        #expect(mkfifo(fifo, 0o600) == 0)
        for arguments in [["run", "--app", "com.example.memo", "--grant", "V=\(fifo)", "--", "/bin/true"],
                          ["resolve", "--app", "com.example.memo", fifo]] {
            let (result, hung) = try runBounded(arguments, home: home)
            #expect(!hung, "\(arguments[0]) hung on a FIFO")
            #expect(result.status == 125)
            #expect(result.stderr.contains("is a FIFO, not a bookmark file"), "\(result.stderr)")
        }
    }

    @Test func pickNeverReplacesADevice() throws {
        try #require(getuid() == 0, "making a device node needs root")
        let home = CLI.Home()
        try FileManager.default.createDirectory(atPath: home.path + "/Vault", withIntermediateDirectories: true)
        let device = home.path + "/dev-null"
        #expect(mknod(device, S_IFCHR | 0o666, dev_t((1 << 8) | 3)) == 0)  // a null device, in scratch
        let result = try CLI.run(["pick", "--app", "com.example.memo", "--select", home.path + "/Vault", "-o", device], home: home)
        #expect(result.status == 125)
        #expect(result.stderr.contains("is a character device"), "\(result.stderr)")
        var st = stat()
        #expect(lstat(device, &st) == 0 && st.st_mode & S_IFMT == S_IFCHR)
        #expect(try CLI.run(["grants", "list"], home: home).stdout.contains("(revoked)") ||
                CLI.run(["grants", "list"], home: home).stdout == "no grants\n", "no live grant for an undelivered bookmark")
    }

    /// The app makes its Library a link to a folder it cannot write; the
    /// launcher, asked to keep the bookmark there, must not write through it.
    @Test func aLinkPlantedInTheContainerIsNotFollowed() throws {
        let home = CLI.Home()
        let container = try CLI.run(["container", "path", "--app", "com.example.memo"], home: home).stdout
            .trimmingCharacters(in: .newlines)
        let elsewhere = home.path + "/elsewhere"
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        try FileManager.default.removeItem(atPath: container + "/Library")
        #expect(symlink(elsewhere, container + "/Library") == 0)
        try FileManager.default.createDirectory(atPath: home.path + "/Vault", withIntermediateDirectories: true)
        let result = try CLI.run(["pick", "--app", "com.example.memo", "--select", home.path + "/Vault",
                                  "-o", container + "/Library/vault.bookmark"], home: home)
        #expect(result.status == 125)
        #expect(result.stderr.contains("is a symbolic link inside a folder an app can write"), "\(result.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: elsewhere) == [])
    }
}

/// Paths are bytes: a folder whose name is not UTF-8 is granted, resolved
/// and handed to the command as itself, not as a lossy copy.
@Suite struct NonUTF8PathTests {
    @Test func aFolderNamedInLatin1IsGrantedResolvedAndReachedAsItself() throws {
        let home = CLI.Home()
        let raw = Array(home.path.utf8) + Array("/caf".utf8) + [0xE9]  // "café" in Latin-1
        #expect(raw.withUnsafeBufferPointer { buffer in
            (buffer.map { CChar(bitPattern: $0) } + [0]).withUnsafeBufferPointer { mkdir($0.baseAddress!, 0o700) }
        } == 0)
        // Argument bytes cannot go through Foundation's Process as they are: python passes them.
        let driver = """
            import os, subprocess, sys
            binary, home, raw = sys.argv[1], sys.argv[2], os.fsencode(sys.argv[3])
            folder = bytes.fromhex(sys.argv[4])
            pick = subprocess.run([binary, b"pick", b"--app", b"com.example.memo", b"--select", folder, b"-o", home.encode() + b"/v.bookmark"])
            print(pick.returncode)
            """
        let hex = raw.map { String(format: "%02x", $0) }.joined()
        let picked = try CLI.program("/usr/bin/python3", ["-c", driver, CLI.binary, home.path, "", hex], environment: home.environment)
        #expect(picked.stdout == "0\n", "\(picked.stderr)")

        let resolved = try CLI.run(["resolve", "--app", "com.example.memo", "--json", home.path + "/v.bookmark"], home: home)
        #expect(resolved.status == 0, "fresh, not moved: \(resolved.stdout)")
        #expect(resolved.stdout.contains(#""hex":"\#(hex)""#), "\(resolved.stdout)")

        let run = try CLI.run(["run", "--app", "com.example.memo", "--grant", "V=\(home.path)/v.bookmark", "--",
                               "/bin/sh", "-c", #"cd "$SANDBOX_GRANT_V" && echo written > note && echo ok"#], home: home)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == "ok\n")
        let note = raw + Array("/note".utf8)
        #expect(note.withUnsafeBufferPointer { buffer in
            (buffer.map { CChar(bitPattern: $0) } + [0]).withUnsafeBufferPointer { access($0.baseAddress!, F_OK) }
        } == 0, "the note landed in the real folder")
    }
}

@Suite struct PolicyLinkTests {
    func container(_ home: CLI.Home) throws -> String {
        try CLI.run(["container", "path", "--app", "com.example.memo"], home: home).stdout.trimmingCharacters(in: .newlines)
    }

    /// A link the app plants in its container, pointing to a policy outside.
    @Test func aLinkPlantedInTheContainerIsRefused() throws {
        let home = CLI.Home()
        let container = try container(home)
        let outside = home.path + "/networked.json"
        try #"{"com.apple.security.network.client": true}"#.write(toFile: outside, atomically: true, encoding: .utf8)
        #expect(symlink(outside, container + "/Library/policy.json") == 0)
        let result = try CLI.run(["run", "--app", "com.example.memo", "--policy", container + "/Library/policy.json", "--", "/bin/true"], home: home)
        #expect(result.status == 125)
        #expect(result.stderr.contains("is a symbolic link"), "\(result.stderr)")
    }

    /// The reverse: a link outside, to a policy the app wrote in its container.
    /// Checking the link's folder alone let this through.
    @Test func aLinkOutsideToAPolicyInTheContainerIsRefused() throws {
        let home = CLI.Home()
        let container = try container(home)
        try #"{"com.apple.security.network.client": true}"#.write(toFile: container + "/Library/evil.json", atomically: true, encoding: .utf8)
        #expect(symlink(container + "/Library/evil.json", home.path + "/policy.json") == 0)
        let result = try CLI.run(["run", "--app", "com.example.memo", "--policy", home.path + "/policy.json", "--", "/bin/true"], home: home)
        #expect(result.status == 125)
        #expect(result.stderr.contains("is a symbolic link"), "\(result.stderr)")
    }

    /// A folder in the container that the app turns into a link to a folder
    /// outside (flipping it back and forth won a race against a check by path).
    @Test func aFolderLinkInTheContainerIsNeverFollowed() throws {
        let home = CLI.Home()
        let container = try container(home)
        try FileManager.default.createDirectory(atPath: home.path + "/policies", withIntermediateDirectories: true)
        try #"{"com.apple.security.network.client": true}"#.write(toFile: home.path + "/policies/p.json", atomically: true, encoding: .utf8)
        #expect(symlink(home.path + "/policies", container + "/pdir") == 0)
        let result = try CLI.run(["run", "--app", "com.example.memo", "--policy", container + "/pdir/p.json", "--", "/bin/true"], home: home)
        #expect(result.status == 125)
        #expect(result.stderr.contains("symbolic link inside a folder an app can write"), "\(result.stderr)")
    }
}

/// The launcher exposes its own executable to the sandbox (for
/// `$SANDBOXED_RUN append`). Run from a file deleted since, the kernel names
/// it "NAME (deleted)": a link planted under that name made the launcher
/// grant read access to whatever the link led to.
@Suite struct DeletedLauncherTests {
    @Test func aPlantedDeletedNameExposesNothing() throws {
        let home = CLI.Home()
        let copy = home.path + "/sr"
        let secret = home.path + "/secret.txt"
        try FileManager.default.copyItem(atPath: CLI.binary, toPath: copy)
        try "the user's secret\n".write(toFile: secret, atomically: true, encoding: .utf8)
        let script = """
            import os, sys
            copy, secret = sys.argv[1], sys.argv[2]
            fd = os.open(copy, os.O_RDONLY)
            os.unlink(copy)
            os.symlink(secret, copy + " (deleted)")
            os.execve("/proc/self/fd/%d" % fd, ["sandboxed-run", "run", "--app", "com.example.cli", "--",
                      "/bin/sh", "-c", 'echo "launcher=${SANDBOXED_RUN-none}"; cat "$0 (deleted)" || echo refused', copy], os.environ)
            """
        let result = try CLI.program("/usr/bin/python3", ["-c", script, copy, secret], environment: home.environment)
        #expect(!result.stdout.contains("the user's secret"))
        #expect(result.stdout.contains("launcher=none"))
        #expect(result.stdout.contains("refused"))
    }
}
