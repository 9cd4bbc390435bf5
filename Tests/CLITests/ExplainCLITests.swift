import Foundation
import Testing

/// `--denials-limit`'s default, as the library has it (the CLI tests do not link it).
enum DenialReporterLimits {
    static let defaultBytes = 16 << 20
}

/// A home with a vault and a folder outside every grant holding a secret.
struct ExplainFixture {
    let home = CLI.Home()
    var vault: String { home.path + "/Vault" }
    var bookmark: String { home.path + "/vault.bookmark" }
    var outside: String { home.path + "/Outside" }

    init() throws {
        try FileManager.default.createDirectory(atPath: vault, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: outside + "/secret.txt", contents: Data("secret\n".utf8))
    }

    func run(_ script: String, _ options: [String] = []) throws -> CLI.Result {
        try CLI.run(["run", "--app", "com.example.memo"] + options + ["--", "/bin/sh", "-c", script], home: home)
    }
}

/// A suite on an `ExplainFixture`: its folders and `run`, by name.
protocol ExplainSuite {
    var fixture: ExplainFixture { get }
}

extension ExplainSuite {
    var home: CLI.Home { fixture.home }
    var vault: String { fixture.vault }
    var bookmark: String { fixture.bookmark }
    var outside: String { fixture.outside }
    func run(_ script: String, _ options: [String] = []) throws -> CLI.Result { try fixture.run(script, options) }
}

/// `run --explain` and `--denials FILE`: each refused operation, explained.
/// Paths outside every grant exist only in the host view, where Landlock
/// refuses them: the tests of its explanations name `--view host`; what the
/// private view says is in `ExplainPrivateViewCLITests`.
@Suite struct ExplainCLITests: ExplainSuite {
    let fixture: ExplainFixture
    init() throws { fixture = try ExplainFixture() }

    @Test func aDeniedReadNamesThePathTheLayerAndThePolicyKey() throws {
        let result = try run("cat \(outside)/secret.txt; cat /etc/shadow; exit 1", ["--explain", "--view", "host"])
        #expect(result.status == 1)
        #expect(result.stdout.isEmpty)
        #expect(result.stderr.contains("sandboxed-run: read denied: \(outside)/secret.txt: outside every grant: a hardcoded path? The container is $HOME ("))
        #expect(result.stderr.contains("[Landlock, openat]"))
        #expect(result.stderr.contains("read denied: /etc/shadow: not in policy builtin:writer (org.sandboxed-run.system-paths.read-only) [Landlock, openat]"))
        #expect(result.stderr.contains("sandboxed-run: exit 1 after "))
    }

    @Test func aDeniedWriteIntoAReadOnlyGrantNamesTheGrant() throws {
        _ = FileManager.default.createFile(atPath: vault + "/today.md", contents: Data("old\n".utf8))
        #expect(try CLI.run(["pick", "--app", "com.example.memo", "--select", vault, "-o", bookmark, "--read-only"], home: home).status == 0)
        let result = try run(
            "echo new >> \"$SANDBOX_GRANT_VAULT/today.md\"; touch -d 2000-01-01 \"$SANDBOX_GRANT_VAULT/today.md\"",
            ["--explain", "--grant", "VAULT=\(bookmark)"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("write denied: \(vault)/today.md: is in grant VAULT, which is read-only; grant it read-write to allow this [Landlock, openat]"))
        // touch: a metadata change the supervisor refuses, explained the same way.
        #expect(result.stderr.contains("metadata denied: \(vault)/today.md: is in grant VAULT, which is read-only; grant it read-write to allow this [supervisor, utimensat]"))
        #expect(try String(contentsOfFile: vault + "/today.md", encoding: .utf8) == "old\n")
    }

    @Test func aDeniedWriteOutsideEveryGrantSaysSo() throws {
        let result = try run("echo x > \(outside)/new.txt; mkdir \(outside)/folder", ["--explain", "--view", "host"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("write denied: \(outside)/new.txt: outside every grant: a hardcoded path?"))
        #expect(result.stderr.contains("write denied: \(outside)/folder: outside every grant: a hardcoded path?"))
        #expect(result.stderr.contains("[Landlock, mkdir"))
        #expect(!FileManager.default.fileExists(atPath: outside + "/new.txt"))
    }

    @Test func aDeniedSyscallNamesTheFilter() throws {
        // ptrace(PTRACE_TRACEME) through libc's syscall(): 101 on x86-64, 117 on arm64.
        let number = (try? CLI.program("/usr/bin/uname", ["-m"]).stdout) == "aarch64\n" ? 117 : 101
        let result = try run("python3 -c 'import ctypes,sys; sys.exit(0 if ctypes.CDLL(None).syscall(\(number),0,0,0,0)==0 else 4)'", ["--explain"])
        #expect(result.status == 4)
        #expect(result.stderr.contains("syscall denied: ptrace: never allowed: it reaches into other processes; no policy key allows it [syscall filter, ptrace]"))
    }

    @Test func aDeniedConnectionNamesTheEntitlement() throws {
        let script = "python3 -c 'import socket; s=socket.socket(); s.connect((\"127.0.0.1\", 9))'"
        let result = try run(script, ["--explain"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("network denied: socket: AF_INET: policy builtin:writer has no network entitlement: com.apple.security.network.client"))
        #expect(result.stderr.contains("[syscall filter, socket]"))
    }

    @Test func theJSONLogHasOneRecordPerDenialAndAnEnd() throws {
        let log = home.path + "/denials.jsonl"
        let result = try run("cat \(outside)/secret.txt; cat \(outside)/secret.txt; echo x > \(outside)/n; exit 2", ["--denials", log, "--view", "host"])
        #expect(result.status == 2)
        // Without --explain on the terminal: one line pointing at it.
        // (cat also reads /usr/share/locale/locale.alias, outside the writer policy: counted too.)
        #expect(result.stderr.contains("sandboxed-run: exit 2 after "))
        #expect(result.stderr.contains(" write); run with --explain to see them"))
        #expect(!result.stderr.contains("read denied"))
        let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
        let records = try lines.map { try JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: Any] }
        let all = records.filter { $0["type"] as? String == "denial" }
        let denials = all.filter { ($0["path"] as? String)?.hasPrefix(outside) == true }
        #expect(denials.count == 3)  // every one, repeats too
        for record in all {
            #expect(Set(record.keys) == ["errno", "layer", "message", "operation", "path", "reason", "syscall", "type"])
            #expect(record["layer"] as? String == "Landlock")
        }
        #expect(denials[0]["path"] as? String == outside + "/secret.txt")
        #expect(denials[2]["operation"] as? String == "write")
        let end = try #require(records.last)
        #expect(end["type"] as? String == "end")
        #expect(end["exit"] as? Int == 2)
        #expect(end["denials"] as? Int == all.count)
        #expect(end["writes"] as? Int == 1)
    }

    @Test func aNameThatIsNotUTF8IsHexInJSONAndEscapedOnTheTerminal() throws {
        let log = home.path + "/denials.jsonl"
        // Landlock refuses existing files only (a missing one is ENOENT): made on the host.
        #expect(try CLI.program("/bin/sh", ["-c", "printf x > \"\(outside)/$(printf 'a\\033[2Jb\\377')\""]).status == 0)
        let result = try run("cat \"\(outside)/$(printf 'a\\033[2Jb\\377')\"", ["--explain", "--denials", log])
        #expect(result.status == 1)
        #expect(result.stderr.contains("\(outside)/a\\x1b[2Jb"))
        #expect(!result.stderr.contains("\u{1B}[2J"))
        let text = try String(contentsOfFile: log, encoding: .utf8)
        let records = try text.split(separator: "\n").map { try JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: Any] }
        let path = try #require(records.compactMap { $0["path"] as? [String: String] }.first)
        #expect(path["hex"]?.hasSuffix("611b5b324a62ff") == true)
    }

    @Test func theLogIsRefusedWhereTheSandboxCanReachIt() throws {
        #expect(try CLI.run(["pick", "--app", "com.example.memo", "--select", vault, "-o", bookmark], home: home).status == 0)
        let inGrant = try run("true", ["--grant", "VAULT=\(bookmark)", "--denials", vault + "/log.jsonl"])
        #expect(inGrant.status == 125)
        #expect(inGrant.stderr.contains("it lies inside a folder an app can write or once could"), "\(inGrant.stderr)")
        // An existing log in a grant is refused untouched.
        _ = FileManager.default.createFile(atPath: vault + "/kept.jsonl", contents: Data("mine\n".utf8))
        #expect(try run("true", ["--grant", "VAULT=\(bookmark)", "--denials", vault + "/kept.jsonl"]).status == 125)
        #expect(try String(contentsOfFile: vault + "/kept.jsonl", encoding: .utf8) == "mine\n")
        // In the container (created by the first run).
        let container = try run("echo $HOME").stdout.trimmingCharacters(in: .newlines)
        let inContainer = try run("true", ["--denials", container + "/Documents/log.jsonl"])
        #expect(inContainer.status == 125)
        #expect(inContainer.stderr.contains("inside a folder an app can write (an app container)"), "\(inContainer.stderr)")
        // A symlink, a FIFO.
        try FileManager.default.createSymbolicLink(atPath: home.path + "/link.jsonl", withDestinationPath: home.path + "/real.jsonl")
        let link = try run("true", ["--denials", home.path + "/link.jsonl"])
        #expect(link.status == 125 && link.stderr.contains("symbolic link"))
        #expect(mkfifo(home.path + "/fifo", 0o600) == 0)
        let fifo = try run("true", ["--denials", home.path + "/fifo"])
        #expect(fifo.status == 125 && fifo.stderr.contains("not a regular file"))
    }

    @Test func withoutExplainOnlySupervisorRefusalsAreCountedAndSaid() throws {
        let result = try run("touch -d 2000-01-01 \(outside)/secret.txt", ["--supervise-metadata", "--view", "host"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("sandboxed-run: exit 1 after 1 denial (1 metadata); run with --explain to see them"))
        // Under read-only mounts (the default) the kernel refuses it, with
        // EROFS, and no supervisor sees it to count.
        // (A root launch on a kernel before 6.15 is supervised: see --report.)
        let mounts = try run("touch -d 2000-01-01 \(outside)/secret.txt", ["--report", "--view", "host"])
        #expect(mounts.status == 1)
        if mounts.stderr.contains("refused elsewhere by read-only mounts (EROFS)") {
            #expect(mounts.stderr.contains("Read-only file system"))
            #expect(!mounts.stderr.contains("denial"))
        } else {
            #expect(mounts.stderr.contains("1 denial (1 metadata)"))
        }
        let clean = try run("exit 3")
        #expect(clean.status == 3)
        #expect(!clean.stderr.contains("denial"))
    }

    @Test func aRefusedRenameOrLinkNamesTheReparentingRuleAndTheFolders() throws {
        #expect(try CLI.run(["pick", "--app", "com.example.memo", "--select", vault, "-o", bookmark], home: home).status == 0)
        _ = FileManager.default.createFile(atPath: vault + "/notes.md", contents: Data("v\n".utf8))
        let log = home.path + "/denials.jsonl"
        let script = """
            ln "$SANDBOX_GRANT_VAULT/notes.md" "$HOME/notes.md"
            echo c > "$HOME/mine"; python3 -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' "$HOME/mine" "$SANDBOX_GRANT_VAULT/mine"
            ln /etc/passwd "$HOME/passwd"
            mkdir -p "$HOME/a" "$HOME/b"; echo x > "$HOME/a/x"; ln "$HOME/a/x" "$HOME/b/x" && echo within ok
            exit 3
            """
        let result = try run(script, ["--explain", "--denials", log, "--grant", "VAULT=\(bookmark)", "--view", "host"])
        #expect(result.status == 3)
        #expect(result.stdout == "within ok\n", "\(result.stderr)")
        let container = try #require(result.stderr.split(separator: "\n").first { $0.contains("link denied: \(vault)/notes.md -> ") })
        #expect(container.contains("/notes.md: Landlock's reparenting rule: from grant VAULT into the app's container, another writable folder"))
        #expect(container.contains("no hard link outlives a grant; copy instead (mv does) [Landlock, linkat]"))
        #expect(result.stderr.contains("/mine -> \(vault)/mine: Landlock's reparenting rule: from the app's container into grant VAULT, another writable folder"))
        #expect(result.stderr.contains("[Landlock, rename]") || result.stderr.contains("[Landlock, renameat"))
        #expect(result.stderr.contains("link denied: /etc/passwd -> "))
        #expect(result.stderr.contains("Landlock's reparenting rule: a folder outside every grant is not writable, and nothing is moved or linked out of such a folder"))
        #expect(result.stderr.contains("exit 3 after 3 denials (1 rename, 2 links)"), "\(result.stderr)")
        // What the kernel did: nothing moved or linked.
        #expect(FileManager.default.fileExists(atPath: vault + "/notes.md"))
        #expect(!FileManager.default.fileExists(atPath: vault + "/mine"))
        let records = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
            .map { try JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: Any] }
        let linked = try #require(records.first { $0["operation"] as? String == "link" && ($0["path"] as? String)?.hasPrefix(vault) == true })
        #expect((linked["destination"] as? String)?.hasSuffix("/notes.md") == true)
        #expect(linked["errno"] as? Int == Int(EXDEV))
        #expect(linked["layer"] as? String == "Landlock")
    }

    /// Landlock refuses a symbolic link where writing is allowed (the make-symlink
    /// right needs `files.symbolic-links`): said with the key and the built-in
    /// policy that has it, counted as a link, in both views. A link moved or
    /// hard-linked within the folder is refused alike.
    @Test(arguments: ["host", "private"]) func aRefusedSymbolicLinkNamesTheKeyAndThePolicyThatAllowsIt(view: String) throws {
        #expect(try CLI.run(["pick", "--app", "com.example.memo", "--select", vault, "-o", bookmark], home: home).status == 0)
        try FileManager.default.createSymbolicLink(atPath: vault + "/old", withDestinationPath: "target")
        let log = home.path + "/denials.jsonl"
        let script = """
            cd "$SANDBOX_GRANT_VAULT" || exit 9
            ln -s a made; mv old moved; ln old linked; ln -s a /tmp/t; exit 1
            """
        let result = try run(script, ["--explain", "--denials", log, "--grant", "VAULT=\(bookmark)", "--view", view])
        #expect(result.status == 1)
        let why = "makes a symbolic link in grant VAULT, and policy builtin:writer allows none in its folders: "
            + "org.sandboxed-run.files.symbolic-links allows them (the built-in policy developer has it: --policy developer) [Landlock, "
        #expect(result.stderr.contains("sandboxed-run: link denied: \(vault)/made: \(why)symlink"), "\(result.stderr)")
        #expect(result.stderr.contains("sandboxed-run: rename denied: \(vault)/old -> \(vault)/moved: \(why)rename"), "\(result.stderr)")
        #expect(result.stderr.contains("sandboxed-run: link denied: \(vault)/old -> \(vault)/linked: \(why)link"), "\(result.stderr)")
        // The private /tmp is the sandbox's own, with a grant's rights; in the host view /tmp is outside every grant.
        let temporary = view == "private" ? "link denied: /tmp/t: makes a symbolic link in the sandbox's own /tmp, and policy builtin:writer"
            : "write denied: /tmp/t: outside every grant"
        #expect(result.stderr.contains("sandboxed-run: \(temporary)"), "\(result.stderr)")
        let records = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
            .map { try JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: Any] }
        let end = try #require(records.last)
        #expect(end["links"] as? Int == (view == "private" ? 3 : 2), "\(records)")
        #expect(end["renames"] as? Int == 1, "\(records)")
        let made = try #require(records.first { ($0["path"] as? String) == vault + "/made" })
        #expect(made["operation"] as? String == "link")
        #expect(made["errno"] as? Int == Int(EACCES))
        #expect(made["layer"] as? String == "Landlock")
        // What the kernel did: nothing made or moved.
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: vault + "/made")) == nil)
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: vault + "/old")) == "target")
        // The policy the line names allows them: nothing refused, nothing said.
        let allowed = try run(
            "cd \"$SANDBOX_GRANT_VAULT\" && ln -s a made && mv old moved && ln moved linked",
            ["--explain", "--grant", "VAULT=\(bookmark)", "--view", view, "--policy", "developer"])
        #expect(allowed.status == 0, "\(allowed.stderr)")
        #expect(!allowed.stderr.contains("denied"), "\(allowed.stderr)")
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: vault + "/made")) == "a")
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: vault + "/linked")) == "target")
    }

    @Test func anUnknownOptionBeforeTheCommandIsAUsageError() throws {
        for options in [["--explian"], ["--denials-limits", "1M"], ["--report", "stray"]] {
            let result = try run("echo ran", options)
            #expect(result.status == 125, "\(options): \(result.stderr)")
            #expect(result.stderr.contains("unknown option '\(options[0])'") || result.stderr.contains("unexpected argument 'stray' before --"),
                    "\(options): \(result.stderr)")
            #expect(result.stdout.isEmpty)
        }
    }

    @Test func theReportSaysWhatRenamesAndLinksMayDo() throws {
        let alone = try run("true", ["--report"])
        #expect(alone.stderr.contains("renames and hard links: free within the writable folder\n"), "\(alone.stderr)")
        #expect(try CLI.run(["pick", "--app", "com.example.memo", "--select", vault, "-o", bookmark], home: home).status == 0)
        let granted = try run("true", ["--report", "--grant", "VAULT=\(bookmark)"])
        #expect(granted.stderr.contains(
            "renames and hard links: free within each writable folder, refused (EXDEV) between them (2 Landlock layers, one per folder)"),
            "\(granted.stderr)")
    }

    /// Every rename and link the kernel refused with Landlock's reparenting
    /// rule is in the log, and nothing else is: not the EXDEV of two mounts,
    /// not the EEXIST that comes before Landlock, not what succeeded.
    /// In the private view the container, each grant that is a mount of its
    /// own and /etc are separate mounts: the kernel refuses between them
    /// (EXDEV) before Landlock is asked, and only the link from the vault
    /// into the grant nested in it is Landlock's.
    @Test(arguments: ["host", "private"]) func reparentingPredictionsAgreeWithTheKernel(view: String) throws {
        let inner = vault + "/inner"
        try FileManager.default.createDirectory(atPath: inner, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: vault + "/v", contents: Data("v".utf8))
        _ = FileManager.default.createFile(atPath: inner + "/i", contents: Data("i".utf8))
        let innerBookmark = home.path + "/inner.bookmark"
        #expect(try CLI.run(["pick", "--app", "com.example.memo", "--select", vault, "-o", bookmark], home: home).status == 0)
        #expect(try CLI.run(["pick", "--app", "com.example.memo", "--select", inner, "-o", innerBookmark], home: home).status == 0)
        let log = home.path + "/denials.jsonl"
        let code = """
            import ctypes, errno, os, sys
            libc = ctypes.CDLL(None, use_errno=True)
            vault, inner = os.environ["SANDBOX_GRANT_VAULT"], os.environ["SANDBOX_GRANT_INNER"]
            os.chdir(os.environ["HOME"]); os.makedirs("a", exist_ok=True); os.makedirs("b", exist_ok=True)
            open("a/mine", "w").write("m"); open("taken", "w").write("t")
            renameat2 = 276 if os.uname().machine == "aarch64" else 316
            def call(label, result):
                print(label, "ok" if result == 0 else errno.errorcode[ctypes.get_errno()])
            def c(path): return path.encode()
            call("within", libc.link(b"a/mine", b"b/within"))
            call("to-vault", libc.link(b"a/mine", c(vault + "/to-vault")))
            call("from-vault", libc.rename(c(vault + "/v"), b"from-vault"))
            call("into-inner", libc.link(c(vault + "/v"), c(inner + "/into-inner")))
            call("out-of-inner", libc.link(c(inner + "/i"), c(vault + "/out-of-inner")))
            call("to-shm", libc.link(b"a/mine", b"/dev/shm/to-shm"))
            call("from-etc", libc.link(b"/etc/passwd", b"from-etc"))
            call("exchange", libc.syscall(renameat2, -100, b"a/mine", -100, c(vault + "/v"), 2))
            call("onto-existing", libc.link(c(vault + "/v"), b"taken"))
            temporary = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o600)
            call("tmpfile", libc.linkat(-100, c("/proc/self/fd/%d" % temporary), -100, c(vault + "/tmpfile"), 0x400))
            held = os.open(vault + "/v", os.O_RDONLY)
            call("empty-path", libc.linkat(held, b"", -100, b"empty-path", 0x1000))
            """
        let result = try CLI.run(
            ["run", "--app", "com.example.memo", "--view", view, "--denials", log, "--grant", "VAULT=\(bookmark)", "--grant", "INNER=\(innerBookmark)",
             "--", "/usr/bin/python3", "-c", code], home: home)
        let outcomes = Dictionary(uniqueKeysWithValues: result.stdout.split(separator: "\n").map { line in
            let parts = line.split(separator: " ")
            return (String(parts[0]), String(parts[1]))
        })
        #expect(outcomes == [
            "within": "ok", "to-vault": "EXDEV", "from-vault": "EXDEV", "into-inner": "EXDEV", "out-of-inner": "ok",
            "to-shm": "EXDEV", "from-etc": "EXDEV", "exchange": "EXDEV", "onto-existing": "EEXIST", "tmpfile": "EXDEV",
            "empty-path": "EXDEV",
        ], "\(result.stderr)")
        let records = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
            .map { try JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: Any] }
        let reported = Set(records.compactMap { record -> String? in
            guard ["rename", "link"].contains(record["operation"] as? String), record["errno"] as? Int == Int(EXDEV),
                  let destination = record["destination"] as? String else { return nil }
            return String(destination.split(separator: "/").last ?? "")
        })
        // By the destination's last name (the exchange's is the vault's file).
        let landlocks: Set<String> = view == "host" ? ["to-vault", "from-vault", "into-inner", "from-etc", "v", "tmpfile", "empty-path"] : ["into-inner"]
        #expect(reported == landlocks, "\(records)")
    }

    /// The observer resolves in the command's mount namespace, from its
    /// root, with its powers: /proc is the sandbox's own, with its pids, and
    /// whether a host process or a hidden name exists never shows in the report.
    @Test func pathsAreJudgedAsTheCommandSeesThem() throws {
        let hostPID = getpid()  // alive on the host, not in the sandbox's pid namespace
        // A folder the command (uid 0 without capabilities) may not search,
        // holding a name that exists and beside it one that does not.
        let hidden = outside + "/hidden"
        #expect(mkdir(hidden, 0o700) == 0 && chown(hidden, 65534, 65534) == 0)
        _ = FileManager.default.createFile(atPath: hidden + "/exists.txt", contents: Data("x".utf8))
        let code = """
            import errno, os
            print(open("/proc/1/status").read().splitlines()[0])
            for path in ["/./proc/1/status", "//proc/%d/status" % \(hostPID), "/./proc/4194303/status", "/./proc/self/status",
                         "\(hidden)/exists.txt", "\(hidden)/absent.txt"]:
                try:
                    open(path).read(); print(path, "ok")
                except OSError as e:
                    print(path, errno.errorcode[e.errno])
            try: open("/proc/self/comm", "w")
            except OSError as e: print("comm", errno.errorcode[e.errno])
            """
        let result = try run("python3 -c '\(code)'", ["--explain", "--view", "host"])
        #expect(result.stdout.split(separator: "\n") == [
            "Name:\tsandbox-keeper", "/./proc/1/status ok", "//proc/\(hostPID)/status ENOENT", "/./proc/4194303/status ENOENT",
            "/./proc/self/status ok", "\(hidden)/exists.txt EACCES", "\(hidden)/absent.txt EACCES", "comm EACCES",
        ], "\(result.stderr)")
        // Nothing said of the pids, nor of the hidden names (the command cannot tell them apart either).
        #expect(!result.stderr.contains("status"), "\(result.stderr)")
        #expect(!result.stderr.contains("hidden/"), "\(result.stderr)")
        // What Landlock did refuse in the sandbox's own /proc is said, with its own rule.
        #expect(result.stderr.contains("write denied: /proc/self/comm: is in the sandbox's own /proc, which is read-only [Landlock, openat]"), "\(result.stderr)")
    }

    @Test func bashAndGlibcProbesAreMarkedNotHidden() throws {
        let log = home.path + "/denials.jsonl"
        // bash opens /dev/tty at start, and asks nscd (through getpwuid) for the user.
        let result = try CLI.run(
            ["run", "--app", "com.example.memo", "--view", "host", "--explain", "--denials", log, "--", "/bin/bash", "-c", "cat \(outside)/secret.txt; exit 1"],
            home: home)
        #expect(result.status == 1)
        #expect(result.stderr.contains("sandboxed-run: expected probe, harmless: write denied: /dev/tty [Landlock, openat]: bash opens /dev/tty at start"))
        #expect(result.stderr.contains("sandboxed-run: expected probe, harmless: network denied: socket [syscall filter, socket]: the socket glibc opens to ask the nscd cache"))
        // The real cause, unmarked, and the count says which were probes.
        #expect(result.stderr.contains("sandboxed-run: read denied: \(outside)/secret.txt: outside every grant"))
        // (glibc may ask nscd more than once: each is counted.)
        let records = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
            .map { try JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: Any] }
        let probes = records.filter { $0["probe"] != nil }
        #expect(Set(probes.compactMap { $0["syscall"] as? String }) == ["openat", "socket"])
        #expect(records.filter { $0["type"] as? String == "denial" && $0["probe"] == nil }.count == 1)
        #expect(records.last?["probes"] as? Int == probes.count)
        #expect(result.stderr.contains("exit 1 after \(probes.count + 1) denials (1 read, 1 write, \(probes.count - 1) network; \(probes.count) of them expected probes)"), "\(result.stderr)")
        // Probes alone: the command's failure is its own, and no line blames the sandbox.
        let alone = try CLI.run(["run", "--app", "com.example.memo", "--", "/bin/bash", "-c", "exit 4"], home: home)
        #expect(alone.status == 4)
        #expect(!alone.stderr.contains("denial"), "\(alone.stderr)")
    }

    @Test func theLogIsCappedInBytesAndTheCommandRunsOn() throws {
        let log = home.path + "/denials.jsonl"
        // 2,000 distinct spellings of one file outside, up to 1,000 bytes each: megabytes uncapped.
        let script = """
            python3 -c '
            import os
            for i in range(2000):
                try: os.open("\(outside)" + "/" * (i // 500 + 1) + "./" * (i % 500) + "secret.txt", os.O_RDONLY)
                except OSError: pass
            print("ran to the end")
            '
            """
        let result = try run(script, ["--denials", log, "--denials-limit", "65536"])
        #expect(result.status == 0)
        #expect(result.stdout == "ran to the end\n")
        let text = try String(contentsOfFile: log, encoding: .utf8)
        #expect(text.utf8.count <= 65536)
        let records = try text.split(separator: "\n").map { try JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: Any] }
        let cuts = records.filter { $0["type"] as? String == "truncated" }
        #expect(cuts.count == 1)
        #expect(cuts.first?["bytes"] as? Int == 65536)
        #expect(cuts.first?["why"] as? String == "byte limit")
        let end = try #require(records.last)
        #expect(end["type"] as? String == "end")
        #expect(end["exit"] as? Int == 0)
        #expect(end["denials"] as? Int ?? 0 >= 2000)  // counted beyond the cut
    }

    @Test(arguments: ["0", "-1", "4095", "16X", "1e6", "", "99999999999999999999", "0x1000"])
    func aBadLogLimitIsAUsageError(limit: String) throws {
        let log = home.path + "/denials.jsonl"
        let result = try run("true", ["--denials", log, "--denials-limit", limit])
        #expect(result.status == 125, "\(limit): \(result.stderr)")
        #expect(result.stderr.contains("--denials-limit"), "\(limit): \(result.stderr)")
    }

    @Test func theLogLimitTakesUnitsAndNeedsALog() throws {
        let log = home.path + "/denials.jsonl"
        #expect(try run("true", ["--denials", log, "--denials-limit", "16M"]).status == 0)
        #expect(try run("true", ["--denials", log, "--denials-limit=4096"]).status == 0)
        let alone = try run("true", ["--denials-limit", "1M"])
        #expect(alone.status == 125)
        #expect(alone.stderr.contains("--denials-limit needs --denials FILE"))
    }

    @Test func tenThousandDistinctHostileDenialsNeitherHangNorFlood() throws {
        // 10,000 distinct spellings (up to 3,000 bytes long) of one existing
        // file whose folder's name holds an escape sequence and an invalid byte.
        #expect(try CLI.program("/bin/sh", ["-c", "mkdir \"\(outside)/$(printf '\\033]0;x\\007\\377')\" && echo s > \"\(outside)/$(printf '\\033]0;x\\007\\377')/s\""]).status == 0)
        let script = """
            python3 -c '
            import os
            base = b"\(outside)"
            for i in range(10000):
                name = base + b"/" * (i // 1500 + 1) + b"./" * (i % 1500) + b"\\x1b]0;x\\x07\\xff/s"
                try: os.open(name, os.O_RDONLY)
                except OSError: pass
            '
            exit 1
            """
        // stderr to a file: a pipe nobody reads while waiting would stall the launcher (backpressure, by design).
        let errors = home.path + "/stderr.txt"
        let log = home.path + "/denials.jsonl"
        let started = Date()
        let quoted = script.replacingOccurrences(of: "'", with: "'\\''")
        let result = try CLI.program("/bin/sh", ["-c", "'\(CLI.binary)' run --app com.example.memo --explain --denials '\(log)' -- /bin/sh -c '\(quoted)' 2>'\(errors)'"], environment: home.environment)
        #expect(Date().timeIntervalSince(started) < 120)
        #expect(result.status == 1)
        let stderr = try String(contentsOfFile: errors, encoding: .utf8)
        let lines = stderr.split(separator: "\n")
        #expect(lines.count <= 4096 + 16)
        #expect(lines.count >= 4096)
        #expect(stderr.contains("beyond 4096 distinct, counted only"))
        // The log stops at 16 MiB (uncapped, these records are about 80 MB), says so once, and closes.
        let text = try String(contentsOfFile: log, encoding: .utf8)
        #expect(text.utf8.count <= DenialReporterLimits.defaultBytes)
        let records = try text.split(separator: "\n").map { try JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: Any] }
        #expect(records.filter { $0["type"] as? String == "truncated" }.count == 1)
        #expect(records.count > 1000)
        #expect(records.last?["type"] as? String == "end")
        #expect(records.last?["denials"] as? Int ?? 0 >= 10_000)
        #expect(!stderr.contains("\u{1B}]0;"))
    }
}

/// The observer only predicts: a child that races its own path memory can
/// confuse its report, never what it may open, and never the launcher.
@Suite struct ExplainRaceTests {
    @Test func aThreadRacingThePathMemoryChangesNothingButTheReport() throws {
        let home = CLI.Home()
        // One thread flips the path between a secret and an allowed file while
        // the main thread opens it, for a fixed time (a GIL-bound count would
        // make the run's length depend on the scheduler).
        let code = """
            import ctypes, os, sys, threading, time
            sys.setswitchinterval(0.0005)
            libc = ctypes.CDLL(None, use_errno=True)
            allowed = os.path.join(os.environ["HOME"], "Documents", "mine.txt")
            open(allowed, "w").write("mine")
            paths = [b"/etc/shadow\\0".ljust(256, b"\\0"), allowed.encode().ljust(256, b"\\0")]
            buffer = ctypes.create_string_buffer(256)
            stop = False
            def flip():
                i = 0
                while not stop:
                    ctypes.memmove(buffer, paths[i % 2], 256); i += 1
            flipper = threading.Thread(target=flip); flipper.start()
            secrets = opens = 0
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                fd = libc.open(buffer, os.O_RDONLY)
                opens += 1
                if fd >= 0:
                    try:
                        if os.read(fd, 16).startswith(b"root:"): secrets += 1
                    except OSError: pass  # a torn path may name a folder
                    os.close(fd)
            stop = True; flipper.join()
            print("secrets read", secrets)
            print("opens", opens, file=sys.stderr)
            """
        let result = try CLI.run(["run", "--app", "com.example.race", "--explain", "--", "/usr/bin/python3", "-c", code], home: home)
        #expect(result.status == 0, "\(result.stderr.suffix(500))")
        #expect(result.stdout == "secrets read 0\n")
        let opens = result.stderr.split(separator: "\n").first { $0.hasPrefix("opens ") }.flatMap { Int($0.dropFirst(6)) } ?? 0
        #expect(opens > 100, "the race hardly ran: \(opens) opens")
    }
}

/// `--explain` in the private view (the default): a path outside the view is
/// named as such, with the ENOENT the command got, and never tells more
/// than the command's own calls could; what Landlock refuses inside the view
/// is explained as in the host view.
@Suite struct ExplainPrivateViewCLITests: ExplainSuite {
    let fixture: ExplainFixture
    init() throws { fixture = try ExplainFixture() }

    @Test func aPathOutsideTheViewIsNamedAsSuchWithItsENOENT() throws {
        let log = home.path + "/denials.jsonl"
        let result = try run("cat \(outside)/secret.txt; echo x > \(outside)/new.txt; exit 1", ["--explain", "--denials", log])
        #expect(result.status == 1)
        #expect(result.stderr.contains("No such file or directory"))
        #expect(result.stderr.contains("sandboxed-run: read denied: \(outside)/secret.txt: not in the sandbox's view"), "\(result.stderr)")
        #expect(result.stderr.contains("sandboxed-run: write denied: \(outside)/new.txt: not in the sandbox's view"), "\(result.stderr)")
        #expect(result.stderr.contains("[private view, openat]"))
        #expect(!FileManager.default.fileExists(atPath: outside + "/new.txt"))
        let records = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
            .map { try JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: Any] }
        let ours = records.filter { ($0["path"] as? String)?.hasPrefix(outside) == true }
        #expect(ours.count == 2)
        for record in ours {
            #expect(record["layer"] as? String == "private view")
            #expect(record["errno"] as? Int == Int(ENOENT))
        }
    }

    /// A file that exists on the host and one that does not look alike to
    /// the command (ENOENT both), and so they do in the report.
    @Test func whetherAHostPathExistsNeverShows() throws {
        let code = """
            import errno, os
            for path in ["\(outside)/secret.txt", "\(outside)/absent.txt", "\(outside)/./././secret.txt"]:
                try:
                    open(path).read(); print("ok")
                except OSError as e:
                    print(errno.errorcode[e.errno])
            """
        let result = try run("python3 -c '\(code)'", ["--explain"])
        #expect(result.stdout == "ENOENT\nENOENT\nENOENT\n", "\(result.stderr)")
        let lines = result.stderr.split(separator: "\n").filter { $0.contains("denied: \(outside)/") }
        #expect(lines.count == 3, "\(result.stderr)")
        let reasons = Set(lines.map { $0.components(separatedBy: ": ").dropFirst(3).joined(separator: ": ") })
        #expect(reasons.count == 1, "\(lines)")
    }

    @Test func aWriteIntoTheViewsOwnRootIsEROFSAndSaid() throws {
        let result = try run("echo x > /planted; exit 1", ["--explain"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("Read-only file system"), "\(result.stderr)")
        #expect(result.stderr.contains("write denied: /planted: is in one of the sandbox's own read-only folders"), "\(result.stderr)")
    }

    @Test func landlockInsideTheViewIsExplainedAsBefore() throws {
        _ = FileManager.default.createFile(atPath: vault + "/today.md", contents: Data("old\n".utf8))
        #expect(try CLI.run(["pick", "--app", "com.example.memo", "--select", vault, "-o", bookmark, "--read-only"], home: home).status == 0)
        let result = try run("echo new >> \"$SANDBOX_GRANT_VAULT/today.md\"; echo x > /proc/self/comm; exit 1", ["--explain", "--grant", "VAULT=\(bookmark)"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("write denied: \(vault)/today.md: is in grant VAULT, which is read-only; grant it read-write to allow this [Landlock, openat]"), "\(result.stderr)")
        #expect(result.stderr.contains("write denied: /proc/self/comm: is in the sandbox's own /proc, which is read-only [Landlock, openat]"), "\(result.stderr)")
        #expect(try String(contentsOfFile: vault + "/today.md", encoding: .utf8) == "old\n")
    }
}
