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
    /// `stdin`: a file the command reads as its stdin (the pty stays its controlling terminal, /dev/tty).
    /// `size`: the terminal's rows and columns.
    func drive(
        _ keys: String, home: CLI.Home, in directory: String? = nil, arguments: [String]? = nil, stdin: String? = nil,
        size: (rows: Int, columns: Int) = (40, 240)
    ) throws -> (Int32, String) {
        // The picker flushes type-ahead when it takes the terminal, so keys are
        // typed only once it has drawn; and nothing here waits forever.
        let driver = """
            import os, pty, select, signal, sys, time
            binary, directory, keys, stdin, rows, columns, arguments = sys.argv[1:5] + [int(sys.argv[5]), int(sys.argv[6])] + [sys.argv[7:]]
            pid, fd = pty.fork()
            if pid == 0:
                import fcntl, struct, termios
                fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
                os.chdir(directory)
                if stdin:
                    os.dup2(os.open(stdin, os.O_RDONLY), 0)
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
                os.write(fd, {"down": b"\\x1b[B", "up": b"\\x1b[A", "right": b"\\x1b[C", "left": b"\\x1b[D",
                           "enter": b"\\r", "space": b" ", "esc": b"\\x1b", "ctrl-c": b"\\x03"}.get(key, key.encode()))
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
        process.arguments = ["-c", driver, CLI.binary, directory ?? home.path, keys, stdin ?? "", "\(size.rows)", "\(size.columns)"] + command
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
        // is, with the cursor on it, and the user chooses it.
        let run = ["run", "--app", "com.example.memo", "--grant", "VAULT=\(home.path)/vault.bookmark", "--", "/bin/sh", "-c", "echo granted:$SANDBOX_GRANT_VAULT"]
        let (status, screen) = try drive("space", home: home, arguments: run)
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
        let (status, _) = try drive("down,space", home: home)
        #expect(status == 0)
        let resolved = try CLI.run(["resolve", "--app", "com.example.memo", "--json", home.path + "/picked.bookmark"], home: home)
        #expect(resolved.stdout.contains(#""path":"\#(home.path)/beta""#), "\(resolved.stdout)")
    }

    /// An app can plant a link named like the vault in a folder it may
    /// write. The picker shows it as a link with its target, and the real
    /// place as what the key chooses; that is what gets granted.
    @Test func aSymlinkIsShownAsALinkAndGrantsOnlyWhatWasShown() throws {
        let home = CLI.Home()
        let target = home.path + "/zz/elsewhere"
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        #expect(symlink("zz/./elsewhere", home.path + "/a-vault") == 0)
        let (status, screen) = try drive("space", home: home)
        #expect(status == 0)
        #expect(screen.contains("a-vault -> zz/./elsewhere (link)"), "\(screen)")
        #expect(screen.contains("space or Enter: choose \(target)\u{1B}"), "\(screen)")
        #expect(!screen.contains("a-vault/"))
        let resolved = try CLI.run(["resolve", "--app", "com.example.memo", "--json", home.path + "/picked.bookmark"], home: home)
        #expect(resolved.stdout.contains(#""path":"\#(target)""#), "\(resolved.stdout)")
    }

    /// The folder is renamed away and another made at its name while the
    /// picker highlights it: what gets granted is the folder the person saw.
    @Test func aFolderSwappedWhileShownIsNotTheOneGranted() throws {
        let home = CLI.Home()
        try FileManager.default.createDirectory(atPath: home.path + "/Aaa", withIntermediateDirectories: true)
        let swap = "sh:cd '\(home.path)' && mv Aaa Seen && mkdir Aaa"
        let (status, _) = try drive("\(swap),space", home: home)
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

    /// q, Esc and Ctrl-C cancel, a folder highlighted or not, and so does
    /// Ctrl-C at the question before a broad grant.
    @Test func cancellingGrantsNothing() throws {
        let home = CLI.Home()
        try FileManager.default.createDirectory(atPath: home.path + "/u/Vault", withIntermediateDirectories: true)
        for keys in ["q", "esc", "ctrl-c", "down,ctrl-c", "c,ctrl-c"] {
            let (status, screen) = try drive(keys, home: home, in: home.path + "/u")
            #expect(status == 1, "\(keys): \(screen)")
            #expect(!FileManager.default.fileExists(atPath: home.path + "/picked.bookmark"), "\(keys)")
        }
        #expect(try granted(home).isEmpty)
    }

    /// However long, the path Space or Enter choose is shown whole, on as
    /// many lines as it takes, never cut (a name outside ASCII counted wide).
    @Test func theFolderChosenIsShownWholeOnANarrowTerminal() throws {
        let home = CLI.Home()
        let listed = home.path + "/u"
        let deep = listed + "/" + String(repeating: "é", count: 70) + "-end"
        try FileManager.default.createDirectory(atPath: deep, withIntermediateDirectories: true)
        let (status, shown) = try drive("q", home: home, in: listed, size: (40, 60))
        #expect(status == 1)
        let screen = shown.replacingOccurrences(of: "\r\r\n", with: "\r\n")  // the pty's ONLCR
        let joined = screen.replacingOccurrences(of: "\u{1B}[0m\r\n", with: "")
        #expect(joined.contains("space or Enter: choose \(deep)"), "\(screen.debugDescription)")
        // Every line fits 60 columns, a character outside ASCII counted as two.
        let frame = screen.components(separatedBy: "\u{1B}[J").last ?? ""
        for line in frame.components(separatedBy: "\r\n") {
            let text = line.replacingOccurrences(of: "\u{1B}\\[[0-9;?]*[A-Za-z]", with: "", options: .regularExpression)
            #expect(text.reduce(0) { $0 + ($1.isASCII ? 1 : 2) } <= 60, "\(text)")
        }
    }

    /// A terminal too small to show what Space would choose says so, and
    /// Space, Enter and c choose nothing there: only cancelling works.
    @Test func aTerminalTooSmallChoosesNothing() throws {
        let home = CLI.Home()
        try FileManager.default.createDirectory(atPath: home.path + "/u/Vault", withIntermediateDirectories: true)
        let (status, screen) = try drive("space,enter,c,y,q", home: home, in: home.path + "/u", size: (5, 80))
        #expect(status == 1, "\(screen)")
        #expect(screen.contains("The terminal is too small to show the folder to choose."), "\(screen.debugDescription)")
        #expect(try granted(home).isEmpty)
    }

    /// The grants of `home` as `grants list --json` gives them: app, access, path.
    func granted(_ home: CLI.Home) throws -> [[String: String]] {
        let list = try CLI.run(["grants", "list", "--json"], home: home)
        let rows = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]], "\(list)")
        return rows.map { row in ["app", "access", "path"].reduce(into: [:]) { $0[$1] = row[$1] as? String } }
    }

    /// `/home/u` lists `Other/`, `Vault/` and a folder named with escape
    /// sequences: the highlighted folder is the one chosen, by Space or by
    /// Enter, never the folder listed (its parent, and everything beside it).
    @Test func theHighlightedFolderIsTheOneChosen() throws {
        let home = CLI.Home()
        let listed = home.path + "/u"
        let hostile = "\u{1B}]0;title\u{07}\u{1B}[2J"
        for name in ["Other", "Vault", hostile] {
            try FileManager.default.createDirectory(atPath: listed + "/" + name, withIntermediateDirectories: true)
        }
        // The hostile name sorts first (ESC), then Other, then Vault.
        for (keys, chosen) in [("down,down,space", "Vault"), ("down,enter", "Other"), ("space", hostile)] {
            let output = home.path + "/\(chosen.count).bookmark"
            let (status, screen) = try drive(keys, home: home, in: listed, arguments: ["pick", "--app", "com.example.memo", "-o", output])
            #expect(status == 0, "\(keys): \(screen)")
            let shownPath = listed + "/" + Printable(chosen)
            #expect(screen.contains("space or Enter: choose \(shownPath)"), "\(keys): \(screen.debugDescription)")
            #expect(screen.contains("granted com.example.memo read-write access to \(shownPath) "), "\(keys): \(screen.debugDescription)")
            let resolved = try CLI.run(["resolve", "--app", "com.example.memo", "--json", output], home: home)
            #expect(resolved.stdout.contains(#""path":"\#(listed)/"#), "\(resolved.stdout)")
        }
        let paths = try granted(home).compactMap { $0["path"] }
        #expect(Set(paths) == Set([listed + "/Vault", listed + "/Other", listed + "/" + hostile]), "\(paths)")
        #expect(!paths.contains(listed), "the folder listed was granted")
        // The name reached the terminal escaped, never as the escape sequences it holds.
        let (_, screen) = try drive("q", home: home, in: listed, arguments: ["pick", "--app", "com.example.memo", "-o", home.path + "/q"])
        #expect(!screen.contains(hostile) && screen.contains("\\x1b]0;title\\x07\\x1b[2J/"), "\(screen.debugDescription)")
    }

    /// The name as the picker shows it.
    func Printable(_ name: String) -> String {
        name.unicodeScalars.map { $0.value < 0x20 ? String(format: "\\x%02x", $0.value) : String($0) }.joined()
    }

    /// → opens the highlighted folder; then Space chooses what is highlighted in it.
    @Test func theRightArrowOpensAndSpaceChoosesInside() throws {
        let home = CLI.Home()
        let listed = home.path + "/u"
        try FileManager.default.createDirectory(atPath: listed + "/Vault/Inner", withIntermediateDirectories: true)
        let (status, screen) = try drive("right,space", home: home, in: listed, arguments: ["pick", "--app", "com.example.memo", "-o", home.path + "/b"])
        #expect(status == 0, "\(screen)")
        #expect(try granted(home).map { $0["path"] } == [listed + "/Vault/Inner"])
    }

    /// `c` chooses the folder listed. Read-write, with a folder highlighted
    /// in it, that is broader than what the person pointed at: the folder
    /// is shown whole and a yes is asked for, on the terminal (/dev/tty),
    /// never on stdin, which here is a file of y's. Any other key goes back.
    @Test func choosingTheFolderListedAsksFirstForReadWrite() throws {
        let home = CLI.Home()
        let listed = home.path + "/u"
        for name in ["Other", "Vault"] {
            try FileManager.default.createDirectory(atPath: listed + "/" + name, withIntermediateDirectories: true)
        }
        let yes = home.path + "/yes"
        _ = FileManager.default.createFile(atPath: yes, contents: Data(String(repeating: "y\n", count: 1000).utf8))
        let pick = ["pick", "--app", "com.example.memo", "-o", home.path + "/b"]
        let (refused, asked) = try drive("c,n,q", home: home, in: listed, arguments: pick, stdin: yes)
        #expect(refused == 1, "\(asked)")
        #expect(asked.contains("Grant read-write access to this whole folder, and everything in it?"), "\(asked)")
        #expect(asked.contains("  \(listed)\u{1B}[0m"), "the folder is shown: \(asked.debugDescription)")
        #expect(asked.contains("It holds more than the highlighted Other/"), "\(asked)")
        #expect(asked.contains("Not granted: choose again."), "\(asked)")
        #expect(try granted(home).isEmpty)

        let (status, screen) = try drive("c,y", home: home, in: listed, arguments: pick)
        #expect(status == 0, "\(screen)")
        #expect(try granted(home).map { $0["path"] } == [listed])
    }

    /// Read-only, or with nothing highlighted (no folders in it), the folder
    /// listed is what is shown to be chosen: no question.
    @Test func choosingTheFolderListedReadOnlyOrEmptyAsksNothing() throws {
        let home = CLI.Home()
        let listed = home.path + "/u"
        try FileManager.default.createDirectory(atPath: listed + "/Vault/Empty", withIntermediateDirectories: true)
        let readOnly = try drive("c", home: home, in: listed, arguments: ["pick", "--app", "com.example.memo", "--read-only", "-o", home.path + "/a"])
        #expect(readOnly.0 == 0 && !readOnly.1.contains("this whole folder"), "\(readOnly.1)")
        let empty = try drive("space", home: home, in: listed + "/Vault/Empty", arguments: ["pick", "--app", "com.example.memo", "-o", home.path + "/b"])
        #expect(empty.0 == 0 && empty.1.contains("(no folders here)"), "\(empty.1)")
        let rows = try granted(home)
        #expect(rows.map { $0["path"] } == [listed, listed + "/Vault/Empty"] || rows.map { $0["path"] } == [listed + "/Vault/Empty", listed], "\(rows)")
        #expect(rows.first { $0["path"] == listed }?["access"] == "read-only")
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
