import Foundation
import Testing

/// Grants at launch: the only way into a user's folder.
@Suite struct GrantsAtLaunchTests {
    let home = CLI.Home()
    var vault: String { home.path + "/Vault" }
    var bookmark: String { home.path + "/vault.bookmark" }

    init() throws {
        try FileManager.default.createDirectory(atPath: home.path + "/Vault", withIntermediateDirectories: true)
    }

    func pick(_ extra: [String] = [], app: String = "com.example.memo") throws -> CLI.Result {
        try CLI.run(["pick", "--app", app, "--select", vault, "-o", bookmark] + extra, home: home)
    }

    func run(_ command: [String], _ options: [String] = [], app: String = "com.example.memo") throws -> CLI.Result {
        try CLI.run(["run", "--app", app, "--grant", "VAULT=\(bookmark)"] + options + ["--"] + command, home: home)
    }

    @Test func aGrantedFolderIsWritableAndNamedInTheEnvironment() throws {
        #expect(try pick().status == 0)
        let script = "echo \"- note\" >> \"$SANDBOX_GRANT_VAULT/today.md\" && chmod 600 \"$SANDBOX_GRANT_VAULT/today.md\" && echo $SANDBOX_GRANT_VAULT"
        let result = try run(["/bin/sh", "-c", script])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == vault + "\n")
        #expect(try String(contentsOfFile: vault + "/today.md", encoding: .utf8) == "- note\n")
        #expect(try FileManager.default.attributesOfItem(atPath: vault + "/today.md")[.posixPermissions] as? Int == 0o600)
    }

    @Test func withoutTheGrantTheFolderIsOutOfReach() throws {
        _ = FileManager.default.createFile(atPath: vault + "/secret.md", contents: Data("secret".utf8))
        // Not there at all in the private view; there, and refused, in the host view.
        let result = try CLI.run(["run", "--app", "com.example.memo", "--", "/bin/cat", vault + "/secret.md"], home: home)
        #expect(result.status == 1)
        #expect(result.stderr.contains("No such file or directory"))
        let host = try CLI.run(["run", "--app", "com.example.memo", "--view", "host", "--", "/bin/cat", vault + "/secret.md"], home: home)
        #expect(host.status == 1)
        #expect(host.stderr.contains("Permission denied"))
    }

    @Test func aReadOnlyGrantCanBeReadButNotChanged() throws {
        _ = FileManager.default.createFile(atPath: vault + "/today.md", contents: Data("old\n".utf8))
        #expect(try pick(["--read-only"]).status == 0)
        let result = try run(["/bin/sh", "-c", "cat \"$SANDBOX_GRANT_VAULT/today.md\"; echo new >> \"$SANDBOX_GRANT_VAULT/today.md\" || echo refused; touch -d 2000-01-01 \"$SANDBOX_GRANT_VAULT/today.md\" || echo refused"])
        #expect(result.stdout == "old\nrefused\nrefused\n")
        #expect(try String(contentsOfFile: vault + "/today.md", encoding: .utf8) == "old\n")
    }

    @Test func theLedgerAndKeysStayOutOfReachOfAConfinedWriter() throws {
        #expect(try pick().status == 0)
        let state = home.path + "/state/sandboxed-run"
        let attack = "cat \(state)/keys/*.key >/dev/null && echo key || echo no-key; cat \(state)/ledger.sqlite >/dev/null && echo ledger || echo no-ledger"
        #expect(try CLI.program("/bin/sh", ["-c", attack]).stdout == "key\nledger\n")
        #expect(try run(["/bin/sh", "-c", attack]).stdout == "no-key\nno-ledger\n")
    }

    @Test func aConfinedWriterCannotMintAGrantEvenByRunningSandboxedRun() throws {
        #expect(try pick().status == 0)
        // A policy that lets the writer execute sandboxed-run from the build folder (and read
        // /proc, where the Swift runtime on Linux finds its arguments).
        let folder = (CLI.binary as NSString).deletingLastPathComponent
        // A debug build loads the Swift runtime from the toolchain: ask ldd where.
        let runtime = Set(try CLI.program("/usr/bin/ldd", [CLI.binary]).stdout
            .split(separator: "\n").compactMap { line -> String? in
                guard let path = line.split(separator: " ").first(where: { $0.hasPrefix("/") }) else { return nil }
                return (String(path) as NSString).deletingLastPathComponent
            }).sorted().map { "\"\($0)\"" }.joined(separator: ", ")
        let policy = home.path + "/with-tool.json"
        try """
            {"com.apple.security.app-sandbox": true, "com.apple.security.files.user-selected.read-write": true,
             "org.sandboxed-run.system-paths.read-execute": ["/usr", "/lib", "/lib64", "/bin", "\(folder)", \(runtime)],
             "org.sandboxed-run.system-paths.read-only": ["/etc/ld.so.cache", "/etc/passwd", "/proc"],
             "org.sandboxed-run.system-paths.read-write": ["/dev/null"]}
            """.write(toFile: policy, atomically: true, encoding: .utf8)
        let stolen = home.path + "/Vault/minted.bookmark"
        // 1. With the real state directory: unreachable.
        let real = try run(["/bin/sh", "-c", "XDG_STATE_HOME=\(home.path)/state \(CLI.binary) pick --app com.example.memo --select / -o \(stolen); echo $?"], ["--policy", policy])
        #expect(real.stdout.hasSuffix("125\n"), "\(real.stdout) \(real.stderr)")
        // (In the private view the state is not there, and its folder cannot be made: EROFS.)
        #expect(real.stderr.contains("the grant ledger failed") || real.stderr.contains("Permission denied")
                || real.stderr.contains("Read-only file system"), "\(real.stderr)")
        // 2. With a state of its own: it cannot even read a folder's identity, because the
        //    sandbox refuses handle syscalls. (A blob sealed by any other key is invalid
        //    to the broker: see BookmarkTamperingTests.)
        let own = try run(["/bin/sh", "-c", "XDG_STATE_HOME=$HOME/Library \(CLI.binary) pick --app com.example.memo --select /usr -o \(stolen); echo $?"], ["--policy", policy])
        #expect(own.stdout.hasSuffix("125\n"), "\(own.stdout) \(own.stderr)")
        #expect(own.stderr.contains("gives no file handle (Operation not permitted)"))
        #expect(!FileManager.default.fileExists(atPath: stolen))
    }

    @Test func anotherAppsBookmarkIsRefused() throws {
        #expect(try pick().status == 0)
        let result = try run(["/bin/true"], app: "com.example.thief")
        #expect(result.status == 125)
        #expect(result.stderr.contains("wrong-app"))
    }

    @Test func aMovedFolderFailsWithoutATerminalAndIsFollowedWhenAsked() throws {
        #expect(try pick().status == 0)
        let moved = home.path + "/Vault-moved"
        #expect(rename(vault, moved) == 0)
        let refused = try run(["/bin/true"])
        #expect(refused.status == 125)
        #expect(refused.stderr.contains("Reconnect your folder: it moved to \(moved)"))
        #expect(refused.stderr.contains("--on-stale follow"))

        let followed = try run(["/bin/sh", "-c", "echo $SANDBOX_GRANT_VAULT"], ["--on-stale", "follow"])
        #expect(followed.status == 0)
        #expect(followed.stdout == moved + "\n")
        let resolved = try CLI.run(["resolve", "--app", "com.example.memo", bookmark], home: home)
        #expect(resolved.status == 0, "the bookmark was rewritten: \(resolved.stdout)")
    }

    @Test func replacedAndRevokedGrantsAreNeverFollowed() throws {
        #expect(try pick().status == 0)
        #expect(rmdir(vault) == 0 && mkdir(vault, 0o755) == 0)
        let replaced = try run(["/bin/true"], ["--on-stale", "follow"])
        #expect(replaced.status == 125)
        #expect(replaced.stderr.contains("replaced:"))

        #expect(try pick().status == 0)
        #expect(try CLI.run(["grants", "revoke", "--app", "com.example.memo"], home: home).stdout == "revoked 2 grants\n")
        let revoked = try run(["/bin/true"], ["--on-stale", "follow"])
        #expect(revoked.status == 125)
        #expect(revoked.stderr.contains("revoked:"))
    }

    /// An id no grant has is a lookup that found nothing, not a broken ledger.
    @Test func revokingAnUnknownIdSaysSoAndNeverThatTheLedgerFailed() throws {
        #expect(try pick().status == 0)  // the ledger exists and is fine
        let listed = try CLI.run(["grants", "list"], home: home).stdout
        let unused = ["ffff", "0000"].first { !listed.hasPrefix($0) }!
        let unknown = try CLI.run(["grants", "revoke", "--grant", unused], home: home)
        #expect(unknown.status == 125)
        #expect(unknown.stderr == "sandboxed-run: no grant has an id starting with \(unused): see `sandboxed-run grants list`\n", "\(unknown.stderr)")
    }

    /// `grants revoke --help` says what revoke does to a launch-time grant
    /// in the private view: cut at once, or the sandbox ended when its command holds the folder.
    @Test func revokeHelpSaysAHeldFolderEndsItsSandbox() throws {
        let help = try CLI.run(["grants", "revoke", "--help"], home: home)
        let text = help.stdout.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        #expect(text.contains("a sandbox that still holds that folder (a descriptor or working directory in it, a file open or mapped there) is ended by its launcher instead"), "\(text)")
    }

    @Test func aMissingBookmarkFileSaysHowToMakeOne() throws {
        let result = try run(["/bin/true"])
        #expect(result.status == 125)
        #expect(result.stderr.contains("no bookmark there yet: make one with `sandboxed-run pick --app com.example.memo -o \(bookmark)`"))
    }

    @Test func aReadOnlyPolicyMakesAGrantReadOnly() throws {
        #expect(try pick().status == 0)
        let result = try run(["/bin/sh", "-c", "touch \"$SANDBOX_GRANT_VAULT/x\" 2>/dev/null || echo refused"], ["--policy", "read-only"])
        #expect(result.stdout == "refused\n")
        #expect(result.stderr.contains("allows user-selected folders read-only"))
    }

    @Test func resolveHasAnExitCodeAndJSONStatusPerClass() throws {
        #expect(try pick().status == 0)
        let fresh = try CLI.run(["resolve", "--app", "com.example.memo", "--json", bookmark], home: home)
        #expect(fresh.status == 0)
        #expect(fresh.stdout.contains(#""status":"fresh""#))
        #expect(rename(vault, vault + "2") == 0)
        #expect(try CLI.run(["resolve", "--app", "com.example.memo", bookmark], home: home).status == 10)
        #expect(try CLI.run(["resolve", "--app", "com.example.other", bookmark], home: home).status == 14)
        try Data("garbage".utf8).write(to: URL(fileURLWithPath: bookmark))
        #expect(try CLI.run(["resolve", "--app", "com.example.memo", bookmark], home: home).status == 15)
    }

    @Test func grantsListShowsWhoCanReachWhat() throws {
        #expect(try pick().status == 0)
        let list = try CLI.run(["grants", "list", "--json"], home: home)
        #expect(list.status == 0)
        #expect(list.stdout.contains(#""app":"com.example.memo""#))
        #expect(list.stdout.contains(#""path":"\#(vault)""#))
    }
}

/// The picker on a real terminal, driven through a pty.
@Suite struct PickerTests {
    /// Runs sandboxed-run with `arguments` on a pty from `directory`, typing `keys`.
    func drive(_ keys: String, home: CLI.Home, in directory: String? = nil, arguments: [String]? = nil) throws -> (Int32, String) {
        // The picker flushes type-ahead when it takes the terminal, so keys are
        // typed only once it has drawn; and nothing here waits forever.
        let driver = """
            import os, pty, select, signal, sys, time
            binary, directory, keys, arguments = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
            pid, fd = pty.fork()
            if pid == 0:
                import fcntl, struct, termios
                fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 240, 0, 0))  # wide enough for scratch paths
                os.chdir(directory)
                os.execv(binary, [binary] + arguments)
            screen = b""
            deadline = time.monotonic() + 60
            def read_some(timeout):
                global screen
                ready, _, _ = select.select([fd], [], [], timeout)
                if not ready:
                    return True
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    return False
                screen += chunk
                return bool(chunk)
            while b"q: cancel" not in screen and time.monotonic() < deadline:
                if not read_some(0.1):
                    break
            for key in keys.split(","):
                if key.startswith("sh:"):  # something else happens on the machine meanwhile
                    os.system(key[3:])
                    continue
                before = len(screen)
                os.write(fd, {"down": b"\\x1b[B", "enter": b"\\r", "space": b" ", "q": b"q", "left": b"\\x1b[D"}[key])
                # Wait for the picker to redraw (or finish) before the next key.
                settle = time.monotonic() + 2
                while len(screen) == before and time.monotonic() < settle:
                    if not read_some(0.1):
                        break
            while time.monotonic() < deadline:
                if not read_some(0.5):
                    break
            if time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            sys.stderr.write(screen.decode(errors="replace"))
            print(os.waitstatus_to_exitcode(status))
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        let command = arguments ?? ["pick", "--app", "com.example.memo", "-o", home.path + "/picked.bookmark"]
        process.arguments = ["-c", driver, CLI.binary, directory ?? home.path, keys] + command
        process.environment = home.environment
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let (printed, shown) = try readOutputs(out, err)
        process.waitUntilExit()
        let screen = String(decoding: shown, as: UTF8.self)
        let lines = String(decoding: printed, as: UTF8.self)
        return (Int32(lines.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1, screen)
    }

    @Test func theFirstLaunchAsksOnceWhenTheBookmarkIsMissing() throws {
        let home = CLI.Home()
        let vault = home.path + "/Vault"
        try FileManager.default.createDirectory(atPath: vault, withIntermediateDirectories: true)
        let run = ["run", "--app", "com.example.memo", "--grant", "VAULT=\(home.path)/vault.bookmark", "--on-missing", "prompt",
                   "--", "/bin/sh", "-c", "echo granted:$SANDBOX_GRANT_VAULT"]
        let (status, screen) = try drive("space", home: home, in: vault, arguments: run)
        #expect(status == 0)
        #expect(screen.contains("granted:\(vault)"))
        // The second launch does not ask: the bookmark is there now.
        let again = try CLI.run(Array(run.dropLast(4)) + ["--", "/bin/true"], home: home)
        #expect(again.status == 0)
    }

    @Test func aMovedFolderOnATerminalOpensThePickerAgain() throws {
        let home = CLI.Home()
        let vault = home.path + "/Vault"
        try FileManager.default.createDirectory(atPath: vault, withIntermediateDirectories: true)
        #expect(try CLI.run(["pick", "--app", "com.example.memo", "--select", vault, "-o", home.path + "/vault.bookmark"], home: home).status == 0)
        let moved = home.path + "/Moved"
        #expect(rename(vault, moved) == 0)
        // On a terminal, --on-stale defaults to prompt: the picker opens where the folder now
        // is, with the cursor on it, and the user opens and chooses it.
        let run = ["run", "--app", "com.example.memo", "--grant", "VAULT=\(home.path)/vault.bookmark", "--", "/bin/sh", "-c", "echo granted:$SANDBOX_GRANT_VAULT"]
        let (status, screen) = try drive("enter,space", home: home, arguments: run)
        #expect(status == 0)
        #expect(screen.contains("granted:\(moved)"))
        #expect(try CLI.run(["resolve", "--app", "com.example.memo", home.path + "/vault.bookmark"], home: home).status == 0)
    }

    @Test func theUserBrowsesAndChoosesAFolder() throws {
        let home = CLI.Home()
        for name in ["alpha", "beta"] {
            try FileManager.default.createDirectory(atPath: home.path + "/" + name, withIntermediateDirectories: true)
        }
        // Home holds alpha, beta (and data/state once used): down once is beta.
        let (status, _) = try drive("down,enter,space", home: home)
        #expect(status == 0)
        let resolved = try CLI.run(["resolve", "--app", "com.example.memo", "--json", home.path + "/picked.bookmark"], home: home)
        #expect(resolved.stdout.contains(#""path":"\#(home.path)/beta""#), "\(resolved.stdout)")
    }

    /// An app can plant a link named like the vault in a folder it may
    /// write. The picker shows it as a link with its target; following it
    /// shows the real place, and that is what gets granted.
    @Test func aSymlinkIsShownAsALinkAndGrantsOnlyWhatWasShown() throws {
        let home = CLI.Home()
        let target = home.path + "/zz/elsewhere"
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        #expect(symlink(target, home.path + "/a-vault") == 0)
        let (status, screen) = try drive("enter,space", home: home)
        #expect(status == 0)
        #expect(screen.contains("a-vault -> \(target) (link)"), "\(screen)")
        #expect(!screen.contains("a-vault/"))
        let resolved = try CLI.run(["resolve", "--app", "com.example.memo", "--json", home.path + "/picked.bookmark"], home: home)
        #expect(resolved.stdout.contains(#""path":"\#(target)""#), "\(resolved.stdout)")
    }

    /// The folder is renamed away and another made at its name while the
    /// picker shows it: what gets granted is the folder the person saw.
    @Test func aFolderSwappedWhileShownIsNotTheOneGranted() throws {
        let home = CLI.Home()
        try FileManager.default.createDirectory(atPath: home.path + "/Aaa", withIntermediateDirectories: true)
        let swap = "sh:cd '\(home.path)' && mv Aaa Seen && mkdir Aaa"
        let (status, _) = try drive("enter,\(swap),space", home: home)
        #expect(status == 0)
        let resolved = try CLI.run(["resolve", "--app", "com.example.memo", "--json", home.path + "/picked.bookmark"], home: home)
        #expect(resolved.stdout.contains(#""path":"\#(home.path)/Seen""#), "\(resolved.stdout)")
    }

    /// A name longer than the terminal is cut to one row, never wrapped.
    @Test func aLongNameStaysOnOneRow() throws {
        let home = CLI.Home()
        let long = "A" + String(repeating: "x", count: 250)
        try FileManager.default.createDirectory(atPath: home.path + "/" + long, withIntermediateDirectories: true)
        let (status, screen) = try drive("q", home: home)
        #expect(status == 1)
        #expect(!screen.contains(long), "the whole name was printed")
        #expect(screen.contains(String(long.prefix(200)) + ""), "\(screen)")
    }

    @Test func cancellingGrantsNothing() throws {
        let home = CLI.Home()
        let (status, _) = try drive("q", home: home)
        #expect(status == 1)
        #expect(!FileManager.default.fileExists(atPath: home.path + "/picked.bookmark"))
    }
}

/// A crash while the ledger is being written leaves it whole.
@Suite struct LedgerCrashTests {
    @Test func killingTheWriterMidTransactionLosesNoConsistency() throws {
        let home = CLI.Home()
        let state = home.path + "/state/sandboxed-run"
        // grants-benchmark writes grants in transactions of 50,000.
        let filler = Process()
        filler.executableURL = URL(fileURLWithPath: (CLI.binary as NSString).deletingLastPathComponent + "/grants-benchmark")
        filler.arguments = [state, home.path + "/work", "400000"]
        filler.standardOutput = FileHandle.nullDevice
        try filler.run()
        Thread.sleep(forTimeInterval: 2.5)
        kill(filler.processIdentifier, SIGKILL)
        filler.waitUntilExit()
        #expect(filler.terminationReason == .uncaughtSignal, "it finished before the kill: nothing was tested")

        func sqlite(_ sql: String) throws -> String {
            try CLI.program("/usr/bin/sqlite3", [state + "/ledger.sqlite", sql]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        #expect(try sqlite("PRAGMA integrity_check") == "ok")
        let count = try #require(Int(try sqlite("SELECT count(*) FROM grants")))
        #expect(count % 50_000 == 0, "only whole transactions: \(count)")
        // And the broker goes on working with it.
        try FileManager.default.createDirectory(atPath: home.path + "/Vault", withIntermediateDirectories: true)
        #expect(try CLI.run(["pick", "--app", "com.example.memo", "--select", home.path + "/Vault", "-o", home.path + "/v.bm"], home: home).status == 0)
        #expect(try CLI.run(["resolve", "--app", "com.example.memo", home.path + "/v.bm"], home: home).status == 0)
    }
}
