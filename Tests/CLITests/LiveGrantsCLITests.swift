import Foundation
import Testing

/// Live grants: a folder the person picks while the command runs, attached
/// in the private view's grant area. The broker's socket is attacked as the
/// hostile command would: descriptors, oversized and malformed messages,
/// paths named by the command, floods of prompts.
@Suite struct LiveGrantsCLITests {
    let home = CLI.Home()
    var folder: String { home.path + "/Picked" }
    var picker: String { home.path + "/picker" }
    /// Written by the picker each time it runs: the prompt it was given.
    var asked: String { home.path + "/asked" }
    static let app = "com.example.live"

    init() throws {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: folder + "/note.txt", contents: Data("picked bytes\n".utf8))
        try writePicker(printing: folder)
    }

    /// A picker that records its prompt and prints `path` (or exits `status`).
    func writePicker(printing path: String, status: Int = 0) throws {
        let script = "#!/bin/sh\nprintf '%s' \"$1\" >> '\(asked)'\necho x >> '\(asked).count'\n"
            + (status == 0 ? "printf '%s\\n' '\(path)'\n" : "exit \(status)\n")
        _ = FileManager.default.createFile(atPath: picker, contents: Data(script.utf8), attributes: [.posixPermissions: 0o755])
    }

    /// A policy file in the home with `keys` set to true besides the writer's system paths.
    func policyFile(keys: [String]) throws -> String {
        let path = home.path + "/policy-\(keys.count)-\(keys.joined().hashValue).plist"
        let entries = keys.map { "<key>\($0)</key><true/>" }.joined()
        let plist = """
            <?xml version="1.0" encoding="UTF-8"?>
            <plist version="1.0"><dict><key>com.apple.security.app-sandbox</key><true/>\(entries)
            <key>org.sandboxed-run.system-paths.read-execute</key>
            <array><string>/usr</string><string>/bin</string><string>/lib</string><string>/lib64</string></array>
            <key>org.sandboxed-run.system-paths.read-only</key>
            <array><string>/etc/ld.so.cache</string></array>
            </dict></plist>
            """
        _ = FileManager.default.createFile(atPath: path, contents: Data(plist.utf8))
        return path
    }

    var pickerRuns: Int {
        ((try? String(contentsOfFile: asked + ".count", encoding: .utf8)) ?? "").split(separator: "\n").count
    }

    func run(_ options: [String], _ script: String, as user: uid_t? = nil) throws -> CLI.Result {
        let arguments = ["run", "--app", Self.app] + options + ["--", "/bin/sh", "-c", script]
        guard user != nil else { return try CLI.run(arguments, home: home) }
        #expect(try CLI.program("/bin/chown", ["-R", "65534:65534", home.path]).status == 0)
        return try CLI.program("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", CLI.binary] + arguments,
                               environment: home.environment)
    }

    func grants(as user: uid_t? = nil) throws -> String {
        guard user != nil else { return try CLI.run(["grants", "list"], home: home).stdout }
        return try CLI.program("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", CLI.binary, "grants", "list"],
                               environment: home.environment).stdout
    }

    /// Python inside the sandbox, speaking the wire protocol itself (docs/live-grants.md).
    static let client = """
        import array, os, socket, struct, sys
        s = socket.socket(fileno=int(os.environ["SANDBOXED_RUN_BROKER_FD"]))
        def request(op=1, flags=0, prompt=b"", extra=b"", version=1):
            return struct.pack("<BBBBH", version, op, flags, 0, len(prompt)) + prompt + extra
        def ask(label, payload, fds=None):
            if fds: s.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
            else: s.send(payload)
            reply = s.recv(9000)
            print(label, reply[1], reply[4:].decode(errors="replace"), flush=True)
            return reply
        """

    static let root = getuid() == 0
    static let canBecomeNobody = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")

    @Test func aFolderPickedMidRunIsReachableInTheSameRunAndWasNotBefore() throws {
        try pickedMidRun(as: nil)
    }

    @Test(.enabled(if: canBecomeNobody, "needs root (to become uid 65534) and setpriv"))
    func aFolderPickedMidRunIsReachableUnprivileged() throws {
        try pickedMidRun(as: 65534)
    }

    func pickedMidRun(as user: uid_t?) throws {
        let script = """
            cat '\(folder)/note.txt' 2>/dev/null && echo before-reached
            p=$("$SANDBOXED_RUN" open-panel --prompt 'for the notes') || exit 9
            echo "at $p"
            cat "$p/note.txt"
            echo written > "$p/new.txt" && echo write-ok
            """
        let result = try run(["--picker", picker], script, as: user)
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout == "at /run/sandboxed-run/grants/1\npicked bytes\nwrite-ok\n", "\(result)")
        #expect((try? String(contentsOfFile: folder + "/new.txt", encoding: .utf8)) == "written\n")
        #expect((try? String(contentsOfFile: asked, encoding: .utf8)) == "\(Self.app) asks for a folder (read-write): for the notes")
        #expect(try grants(as: user).contains(folder), "the grant is in the ledger")
    }

    /// A Python program runs the client through subprocess, which closes
    /// inherited descriptors unless told (close_fds=True): the client says
    /// the broker's socket was closed on the way and how to keep it
    /// (pass_fds); with pass_fds it works. A number reused by something
    /// else is told apart from one that is not open.
    @Test func aBrokerSocketClosedOnTheWayIsSaidToBeAndPassFdsKeepsIt() throws {
        let code = """
            import os, subprocess
            run = os.environ["SANDBOXED_RUN"]
            fd = int(os.environ["SANDBOXED_RUN_BROKER_FD"])
            bookmark = os.environ["SANDBOX_CONTAINER"] + "/notes.bookmark"
            def client(label, *words, **options):
                p = subprocess.run([run] + list(words), capture_output=True, text=True, **options)
                print(label, p.returncode, (p.stdout + p.stderr).strip(), flush=True)
            client("panel", "open-panel", "-o", bookmark, pass_fds=[fd])
            client("closed", "start-accessing", bookmark)
            client("passed", "start-accessing", bookmark, pass_fds=[fd])
            r, w = os.pipe()
            os.dup2(r, fd)
            client("reused", "stop-accessing", bookmark, pass_fds=[fd])
            """
        let result = try run(["--picker", picker], "python3 -c '\(code)'")
        #expect(result.status == 0, "\(result)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        try #require(lines.count == 4, "\(result)")
        #expect(lines[0] == "panel 0 /run/sandboxed-run/grants/1", "\(lines[0])")
        #expect(lines[1].hasPrefix("closed 125 ") && lines[1].contains("(SANDBOXED_RUN_BROKER_FD) is not open in this process"), "\(lines[1])")
        let advice = "subprocess.run([...], pass_fds=[int(os.environ[\"SANDBOXED_RUN_BROKER_FD\"])])"
        #expect(lines[1].contains(advice) && lines[1].contains("close_fds=True"), "\(lines[1])")
        #expect(lines[2] == "passed 0 /run/sandboxed-run/grants/1", "\(lines[2])")
        #expect(lines[3].hasPrefix("reused 125 ") && lines[3].contains("is a pipe, not a live-grant broker's socket"), "\(lines[3])")
        #expect(lines[3].contains("closed on the way here and its number reused") && lines[3].contains(advice), "\(lines[3])")
    }

    @Test func aReadOnlyPickIsReadOnly() throws {
        let script = """
            p=$("$SANDBOXED_RUN" open-panel --read-only) || exit 9
            cat "$p/note.txt"
            echo x > "$p/new.txt" || echo write-refused
            rm "$p/note.txt" || echo remove-refused
            """
        for options in [["--picker", picker], ["--picker", picker, "--policy", "read-only"]] {
            let result = try run(options, script)
            #expect(result.status == 0 && result.stdout == "picked bytes\nwrite-refused\nremove-refused\n", "\(options): \(result)")
            #expect(result.stderr.contains("Read-only file system"), "\(result.stderr)")
        }
        // The read-only policy caps a read-write request.
        let capped = try run(["--picker", picker, "--policy", "read-only"], "p=$(\"$SANDBOXED_RUN\" open-panel) && echo x > \"$p/new.txt\" || echo capped")
        #expect(capped.stdout == "capped\n", "\(capped)")
        #expect(!FileManager.default.fileExists(atPath: folder + "/new.txt"))
    }

    /// While a launch is staged (`--review`), a folder attached while it runs
    /// cannot be staged: it is given read-only, so nothing is written unseen.
    @Test func aLiveGrantIsReadOnlyWhileTheLaunchIsStaged() throws {
        let script = "p=$(\"$SANDBOXED_RUN\" open-panel) || exit 9; cat \"$p/note.txt\"; echo x > \"$p/new.txt\" || echo capped"
        let staged = try run(["--picker", picker, "--review"], script)
        #expect(staged.stdout == "picked bytes\ncapped\n", "\(staged)")
        #expect(!FileManager.default.fileExists(atPath: folder + "/new.txt"))
        // The same without --review writes: the test can tell.
        let plain = try run(["--picker", picker], script)
        #expect(plain.stdout == "picked bytes\n", "\(plain)")
        #expect(FileManager.default.fileExists(atPath: folder + "/new.txt"))
    }

    @Test func openPanelWithoutAPickerFailsAtOnceAndGrantsNothing() throws {
        let result = try run([], "\"$SANDBOXED_RUN\" open-panel; echo \"status $?\"")
        #expect(result.stdout == "status 2\n", "\(result)")
        #expect(result.stderr.contains("nobody to ask"), "\(result.stderr)")
        // A policy without a live-grant key: no socket at all.
        let bare = try run(["--policy", try policyFile(keys: [])],
                           "\"$SANDBOXED_RUN\" open-panel; echo \"status $?\"; echo \"fd ${SANDBOXED_RUN_BROKER_FD-none}\"")
        #expect(bare.stdout == "status 3\nfd none\n", "\(bare)")
        #expect(bare.stderr.contains("live grants are not available here"), "\(bare.stderr)")
        // The person cancels: 1, and nothing is granted either.
        try writePicker(printing: folder, status: 1)
        let cancelled = try run(["--picker", picker], "\"$SANDBOXED_RUN\" open-panel; echo \"status $?\"; ls /run/sandboxed-run/grants")
        #expect(cancelled.stdout == "status 1\n", "\(cancelled)")
        #expect(try !grants().contains(folder))
        // In the host view nothing can be attached: said so, nothing asked.
        try writePicker(printing: folder)
        let host = try run(["--picker", picker, "--view", "host"], "\"$SANDBOXED_RUN\" open-panel; echo \"status $?\"")
        #expect(host.stdout == "status 3\n" && host.stderr.contains("host view"), "\(host)")
        #expect(pickerRuns == 1)
        #expect(try !grants().contains(folder))
    }

    /// SCM_RIGHTS on the broker's socket: refused, the picker never runs,
    /// and no descriptor of the command's ever enters the launcher.
    @Test func descriptorsSentByTheCommandAreRefused() throws {
        let code = Self.client + "\n" + """
            ask("with-fd", request(prompt=b"x"), fds=[0, 1])
            ask("plain", request(prompt=b"y"))
            """
        let result = try run(["--picker", picker], "python3 -c '\(code)'")
        #expect(result.status == 0, "\(result)")
        let lines = result.stdout.split(separator: "\n")
        #expect(lines.first == "with-fd 5 descriptors sent with a request are refused", "\(result)")
        #expect(lines.last == "plain 0 /run/sandboxed-run/grants/1", "\(result)")
        #expect(pickerRuns == 1, "only the plain request reached the picker")
    }

    @Test func oversizedAndMalformedRequestsAreRefusedAndTheSandboxKeepsWorking() throws {
        let code = Self.client + "\n" + """
            ask("oversized", request(prompt=b"a" * 512, extra=b"b" * 8000))
            ask("short", b"\\x01\\x01")
            ask("version", request(version=2))
            ask("operation", request(op=9))
            ask("flags", request(flags=0x80))
            ask("length", request(prompt=b"ab")[:-1])
            ask("ok", request(prompt=b"after all that"))
            """
        let result = try run(["--picker", picker], "python3 -c '\(code)'; echo done")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        try #require(lines.count == 8, "\(result)")
        for line in lines.prefix(6) { #expect(line.split(separator: " ")[1] == "5", "\(line)") }
        #expect(lines.first?.contains("at most 8198 bytes") == true, "\(lines)")
        #expect(lines[6] == "ok 0 /run/sandboxed-run/grants/1" && lines[7] == "done", "\(result)")
        #expect(pickerRuns == 1)
    }

    /// The protocol has no way to name a path: a request that carries one
    /// after its prompt is refused whole, and a path given as the prompt is
    /// only shown to the person (escaped), who picks what is granted.
    @Test func theCommandCannotNameAPathAndReceiveIt() throws {
        let code = Self.client + "\n" + """
            ask("path-after", request(prompt=b"p", extra=b"/etc"))
            ask("path-op", request(op=2, prompt=b"/etc"))
            r = ask("as-prompt", request(prompt=b"/etc\\x1b]0;owned\\x07\\n"))
            print(open(r[4:].decode() + "/note.txt").read(), end="")
            """
        let result = try run(["--picker", picker], "python3 -c '\(code)'")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        try #require(lines.count == 4, "\(result)")
        // Operation 2 takes a bookmark: a path there is no bookmark (15, invalid).
        #expect(lines[0].hasPrefix("path-after 5 ") && lines[1].hasPrefix("path-op 15 invalid: "), "\(lines)")
        #expect(lines[2] == "as-prompt 0 /run/sandboxed-run/grants/1" && lines[3] == "picked bytes", "\(lines)")
        let prompt = (try? String(contentsOfFile: asked, encoding: .utf8)) ?? ""
        #expect(prompt == "\(Self.app) asks for a folder (read-write): /etc\\x1b]0;owned\\x07\\n", "\(prompt)")
    }

    /// A command cannot flood the person with pickers: after a burst, busy.
    @Test func promptsAreRateLimited() throws {
        try writePicker(printing: folder, status: 1)
        let script = "for i in 1 2 3 4; do \"$SANDBOXED_RUN\" open-panel; echo \"status $?\"; done"
        let result = try run(["--picker", picker], script)
        #expect(result.stdout == "status 1\nstatus 1\nstatus 1\nstatus 5\n", "\(result)")
        #expect(pickerRuns == 3)
    }

    /// The folder the picker names is checked as `pick --select` checks it:
    /// the broker's own state is never granted.
    @Test func aProtectedFolderIsRefused() throws {
        #expect(try CLI.run(["pick", "--app", Self.app, "--select", folder, "-o", home.path + "/b"], home: home).status == 0)  // makes the state
        try writePicker(printing: home.path + "/state/sandboxed-run")
        let result = try run(["--picker", picker], "\"$SANDBOXED_RUN\" open-panel; echo \"status $?\"; ls /run/sandboxed-run/grants")
        #expect(result.stdout == "status 4\n", "\(result)")
        #expect(result.stderr.contains("sandboxed-run"), "\(result.stderr)")
    }

    // MARK: Bookmarks: open-panel -o, start-accessing, stop-accessing

    /// The app's container on the host (made by a first run).
    func container() throws -> String {
        let result = try run([], "printf %s \"$SANDBOX_CONTAINER\"")
        #expect(result.status == 0 && result.stdout.hasPrefix("/"), "\(result)")
        return result.stdout
    }

    func resolve(_ file: String, app: String = LiveGrantsCLITests.app) throws -> CLI.Result {
        try CLI.run(["resolve", "--app", app, file], home: home)
    }

    /// A bookmark the host's `pick` wrote into the container; its grant id.
    @discardableResult
    func pickInto(_ file: String, folder: String? = nil, app: String = LiveGrantsCLITests.app, readOnly: Bool = false) throws -> String {
        let result = try CLI.run(["pick", "--app", app, "--select", folder ?? self.folder, "-o", file] + (readOnly ? ["--read-only"] : []), home: home)
        #expect(result.status == 0, "\(result)")
        return String((result.stdout + result.stderr).split(separator: "(grant ").last?.prefix(12) ?? "")
    }

    /// With stdin a file on the host's disk the launch is supervised (no
    /// read-only mounts): the bookmark is still written, with no chmod the
    /// supervisor would refuse (an unnamed file has no place it could check).
    @Test func openPanelWritesTheBookmarkUnderTheSupervisor() throws {
        let input = home.path + "/input"
        _ = FileManager.default.createFile(atPath: input, contents: Data("x\n".utf8))
        let script = #"p=$("$SANDBOXED_RUN" open-panel -o "$SANDBOX_CONTAINER/s.bookmark") || exit 9; stat -c %a "$SANDBOX_CONTAINER/s.bookmark""#
        let command = ([CLI.binary, "run", "--app", Self.app, "--picker", picker, "--", "/bin/sh", "-c", script].map { "'\($0)'" })
            .joined(separator: " ") + " < '\(input)'"
        let result = try CLI.program("/bin/sh", ["-c", command], environment: home.environment)
        #expect(result.status == 0 && result.stdout == "600\n", "\(result)")
    }

    /// open-panel -o: the broker sends a bookmark sealed for this app, and
    /// the command itself writes it (in its container); the host resolves it fresh.
    @Test func openPanelWritesABookmarkSealedForThisApp() throws {
        let script = """
            p=$("$SANDBOXED_RUN" open-panel -o "$SANDBOX_CONTAINER/notes.bookmark") || exit 9
            echo "at $p"; printf '%s' "$SANDBOX_CONTAINER" > "$SANDBOX_CONTAINER/where"
            """
        let result = try run(["--picker", picker], script)
        #expect(result.status == 0 && result.stdout == "at /run/sandboxed-run/grants/1\n", "\(result)")
        let box = try String(contentsOfFile: try container() + "/where", encoding: .utf8)
        let file = box + "/notes.bookmark"
        #expect(try resolve(file).status == 0, "fresh, for this app")
        #expect(try resolve(file, app: "com.example.other").status == 14, "another app's: wrong-app")
        // A policy without bookmarks.app-scope makes none: refused before the person is asked.
        let before = pickerRuns
        let policy = try policyFile(keys: ["com.apple.security.files.user-selected.read-write"])
        let refused = try run(["--picker", picker, "--policy", policy],
                              "\"$SANDBOXED_RUN\" open-panel -o \"$SANDBOX_CONTAINER/other.bookmark\"; echo \"status $?\"")
        #expect(refused.stdout == "status 3\n" && refused.stderr.contains("bookmarks.app-scope"), "\(refused)")
        #expect(pickerRuns == before && !FileManager.default.fileExists(atPath: box + "/other.bookmark"))
    }

    /// A bookmark persisted in one run opens in a later run with no --grant
    /// and no picker; starts are counted, the last stop cuts access, a folder
    /// not started is refused, and descriptors already open keep working.
    @Test func aBookmarkOpensInALaterRunAndStopAccessingCutsIt() throws {
        try startAndStop(as: nil)
    }

    @Test(.enabled(if: canBecomeNobody, "needs root (to become uid 65534) and setpriv"))
    func aBookmarkOpensInALaterRunUnprivileged() throws {
        try startAndStop(as: 65534)
    }

    func startAndStop(as user: uid_t?) throws {
        let first = try run(["--picker", picker], "\"$SANDBOXED_RUN\" open-panel -o \"$SANDBOX_CONTAINER/b\" >/dev/null && echo ok", as: user)
        #expect(first.stdout == "ok\n", "\(first)")
        let script = """
            b="$SANDBOX_CONTAINER/b"
            ls /run/sandboxed-run/grants
            p=$("$SANDBOXED_RUN" start-accessing "$b") || exit 9
            q=$("$SANDBOXED_RUN" start-accessing "$b") || exit 8
            echo "at $p $q"; cat "$p/note.txt"
            exec 3< "$p/note.txt"
            "$SANDBOXED_RUN" stop-accessing "$b" && cat "$p/note.txt" >/dev/null && echo still-started
            # The last stop, while a file there is open: refused (5, busy), still attached.
            "$SANDBOXED_RUN" stop-accessing "$b" 2>/dev/null; echo "held $?"
            cat <&3
            exec 3<&-
            "$SANDBOXED_RUN" stop-accessing "$b" && echo stopped
            cat "$p/note.txt" 2>/dev/null || echo unreachable
            "$SANDBOXED_RUN" stop-accessing "$b"; echo "again $?"
            "$SANDBOXED_RUN" start-accessing "$b"; echo "restart $?"
            """
        let result = try run([], script, as: user)
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout == """
            at /run/sandboxed-run/grants/1 /run/sandboxed-run/grants/1
            picked bytes
            still-started
            held 5
            picked bytes
            stopped
            unreachable
            again 6
            /run/sandboxed-run/grants/2
            restart 0

            """, "\(result)")
    }

    /// Every rule of `resolve`, with its exit code: a revoked grant, another
    /// app's bookmark, bytes that are no bookmark, a replaced folder; a moved
    /// folder is followed and the command gets the renewed bookmark to write.
    @Test func startAccessingAppliesResolvesRules() throws {
        let box = try container()
        let attempt = { (file: String) throws -> CLI.Result in
            try self.run([], "\"$SANDBOXED_RUN\" start-accessing \"$SANDBOX_CONTAINER/\(file)\" && cat \"$(\"$SANDBOXED_RUN\" start-accessing \"$SANDBOX_CONTAINER/\(file)\")/note.txt\"; echo \"status $?\"")
        }
        // Revoked.
        let revoked = try pickInto(box + "/revoked")
        #expect(try CLI.run(["grants", "revoke", "--grant", revoked], home: home).status == 0)
        // Another app's, copied into this app's container.
        try pickInto(box + "/other", app: "com.example.other")
        // Not a bookmark.
        _ = FileManager.default.createFile(atPath: box + "/garbage", contents: Data("SRBM\u{1}/etc".utf8))
        for (file, status) in [("revoked", 13), ("other", 14), ("garbage", 15)] {
            let result = try attempt(file)
            #expect(result.stdout == "status \(status)\n", "\(file): \(result)")
        }
        // Replaced: deleted and made again at the same path.
        let second = home.path + "/Second"
        try FileManager.default.createDirectory(atPath: second, withIntermediateDirectories: true)
        try pickInto(box + "/replaced", folder: second)
        try FileManager.default.removeItem(atPath: second)
        try FileManager.default.createDirectory(atPath: second, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: second + "/note.txt", contents: Data("impostor\n".utf8))
        #expect(try attempt("replaced").stdout == "status 11\n")
        // Moved: followed; the command rewrites its bookmark, which then resolves fresh.
        try pickInto(box + "/moved")
        let bytes = try Data(contentsOf: URL(fileURLWithPath: box + "/moved"))
        try FileManager.default.moveItem(atPath: folder, toPath: home.path + "/Renamed")
        let moved = try run([], "cat \"$(\"$SANDBOXED_RUN\" start-accessing \"$SANDBOX_CONTAINER/moved\")/note.txt\"; echo \"status $?\"")
        #expect(moved.stdout == "picked bytes\nstatus 0\n" && moved.stderr.contains("rewritten"), "\(moved)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: box + "/moved")) != bytes)
        let fresh = try resolve(box + "/moved")
        #expect(fresh.status == 0 && fresh.stdout.contains("Renamed"), "\(fresh)")
    }

    /// `grants revoke` reaches every running sandbox that has the folder: a
    /// command looking up a file of a folder it started accessing, over and
    /// over, finds it gone soon after the revocation, even after closing its
    /// broker socket, and nothing of the folder is listed after that; a
    /// command holding the folder (a descriptor or its working directory
    /// there) is ended.
    @Test(arguments: [true, false])
    func grantsRevokeCutsRunningCommands(holding: Bool) throws {
        try revokeCuts(as: nil, holding: holding)
    }

    @Test(.enabled(if: canBecomeNobody, "needs root (to become uid 65534) and setpriv"), arguments: [true, false])
    func grantsRevokeCutsRunningCommandsUnprivileged(holding: Bool) throws {
        try revokeCuts(as: 65534, holding: holding)
    }

    /// A grant given at launch (`--grant`) is a mount of its own in the
    /// private view: revoking it cuts it in the running command too, or,
    /// where the command holds it, ends the sandbox, as for a folder
    /// attached while running.
    @Test(arguments: [true, false])
    func grantsRevokeCutsLaunchTimeGrants(holding: Bool) throws {
        try revokeCuts(as: nil, launchTime: true, holding: holding)
    }

    @Test(.enabled(if: canBecomeNobody, "needs root (to become uid 65534) and setpriv"), arguments: [true, false])
    func grantsRevokeCutsLaunchTimeGrantsUnprivileged(holding: Bool) throws {
        try revokeCuts(as: 65534, launchTime: true, holding: holding)
    }

    /// `holding`: the command keeps a file of the folder open and its working directory there.
    func revokeCuts(as user: uid_t?, launchTime: Bool = false, holding: Bool = true) throws {
        let box = try container()
        let id = try pickInto(box + "/b")
        let access = launchTime
            ? #"p="$SANDBOX_GRANT_B"; [ -n "$p" ] || exit 9"#
            : #"p=$("$SANDBOXED_RUN" start-accessing "$SANDBOX_CONTAINER/b") || exit 9"#
        let script = """
            \(access)
            \(holding ? #"exec 3< "$p/note.txt""# : "exec 3< /dev/null")
            # The command closes its end of the broker: revocations still reach it.
            eval "exec $SANDBOXED_RUN_BROKER_FD>&-"
            \(holding ? #"cd "$p" || exit 8"# : "cd /")
            : > "$SANDBOX_CONTAINER/ready-$0"
            # Looked up (access(2)), never opened: a file open there when the revocation
            # comes is held (the helper asks again for 50 ms only), and ends the sandbox.
            while [ $SECONDS -lt 20 ] && [ -r "$p/note.txt" ]; do :; done
            date +%s%N > "$SANDBOX_CONTAINER/failed-$0"
            cat "$p/note.txt" 2>/dev/null || echo read-refused
            (echo x > "$p/made-after") 2>/dev/null && echo write-kept || echo write-refused
            # Nothing of the folder is listed from then on. An attached folder's mount
            # point, empty once unmounted, is removed just after the unmount: waited for.
            [ -z "$(ls -A "$p" 2>/dev/null)" ] || echo listed
            SECONDS=0
            while ls "$p" > /dev/null 2>&1 && [ $SECONDS -lt 5 ]; do sleep 0.01; done
            ls "$p" 2>/dev/null || echo gone
            """
        if user != nil { #expect(try CLI.program("/bin/chown", ["-R", "65534:65534", home.path]).status == 0) }
        let prefix = user == nil ? [] : ["--reuid=65534", "--regid=65534", "--clear-groups", CLI.binary]
        func start(_ name: String) throws -> (Process, Pipe) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: user == nil ? CLI.binary : "/usr/bin/setpriv")
            process.arguments = prefix + ["run", "--app", Self.app] + (launchTime ? ["--grant", "B=" + box + "/b"] : [])
                + ["--", "/bin/bash", "-c", script, name]
            process.environment = home.environment
            let out = Pipe()
            process.standardOutput = out
            // Kept for the failure messages: why a sandbox ended, if it did.
            _ = FileManager.default.createFile(atPath: home.path + "/stderr-" + name, contents: nil)
            process.standardError = FileHandle(forWritingAtPath: home.path + "/stderr-" + name)
            process.standardInput = FileHandle.nullDevice
            try process.run()
            return (process, out)
        }
        func errors(_ name: String) -> String {
            (try? String(contentsOfFile: home.path + "/stderr-" + name, encoding: .utf8)) ?? ""
        }
        let commands = try ["one", "two"].map { name in (name, try start(name)) }
        var waited = 0
        while !commands.allSatisfy({ FileManager.default.fileExists(atPath: box + "/ready-" + $0.0) }) && waited < 400 {
            usleep(50_000)
            waited += 1
        }
        usleep(200_000)
        let revoked = try CLI.program(user == nil ? CLI.binary : "/usr/bin/setpriv", prefix + ["grants", "revoke", "--grant", id],
                                      environment: home.environment)
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let revokedAt = Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
        #expect(revoked.status == 0, "\(revoked)")
        for (name, (process, out)) in commands {
            let stdout = try String(decoding: out.fileHandleForReading.readAll(), as: UTF8.self)
            process.waitUntilExit()
            if holding {
                // It holds the folder (its working directory, a file open
                // there): detached under it, it would still show the folder's
                // names and attributes, so the sandbox is ended (issue 30).
                clock_gettime(CLOCK_REALTIME, &now)
                let endedAt = Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
                #expect(process.terminationStatus == 125 && stdout.isEmpty, "\(name): \(process.terminationStatus) \(stdout) \(errors(name))")
                #expect(endedAt - revokedAt < 1_000_000_000, "\(name): ended \((endedAt - revokedAt) / 1_000_000) ms after the revocation")
                continue
            }
            // Nothing held: the folder is gone from the view, and the command goes on.
            #expect(process.terminationStatus == 0 && stdout == "read-refused\nwrite-refused\ngone\n",
                    "\(name): exit \(process.terminationStatus), \(stdout) \(errors(name))")
            let failed = Int64((try? String(contentsOfFile: box + "/failed-" + name, encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? 0
            // 100 ms is the aim (measured in Benchmarks/live-grants.sh); generous here, the machine is shared.
            #expect(failed - revokedAt < 500_000_000, "\(name): access ended \((failed - revokedAt) / 1_000_000) ms after the revocation")
        }
    }

    /// Fail closed: a revoked folder that cannot be taken away (here the
    /// grant helper was killed) ends the sandbox, with a message and 125.
    @Test func aRevocationThatCannotBeEnforcedEndsTheSandbox() throws {
        let box = try container()
        let id = try pickInto(box + "/b")
        let script = """
            p=$("$SANDBOXED_RUN" start-accessing "$SANDBOX_CONTAINER/b") || exit 9
            : > "$SANDBOX_CONTAINER/ready"
            while [ $SECONDS -lt 20 ]; do cat "$p/note.txt" > /dev/null || exit 7; sleep 0.05; done
            : > "$SANDBOX_CONTAINER/survived"
            exit 3
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CLI.binary)
        process.arguments = ["run", "--app", Self.app, "--", "/bin/bash", "-c", script]
        process.environment = home.environment
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        var waited = 0
        while !FileManager.default.fileExists(atPath: box + "/ready") && waited < 400 {
            usleep(50_000)
            waited += 1
        }
        // The launcher's children: the keeper and the grant helper it forked for the start.
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process.processIdentifier)/task")) ?? []
        let children = tasks.flatMap { task in
            ((try? String(contentsOfFile: "/proc/\(process.processIdentifier)/task/\(task)/children", encoding: .utf8)) ?? "")
                .split(separator: " ").compactMap { pid_t($0) }
        }
        let helpers = children.filter { child in
            (try? String(contentsOfFile: "/proc/\(child)/comm", encoding: .utf8))?.hasPrefix("sandbox-grants") == true
        }
        #expect(helpers.count == 1, "children \(children)")
        for helper in helpers { kill(helper, SIGKILL) }
        usleep(100_000)
        let revoked = try CLI.run(["grants", "revoke", "--grant", id], home: home)
        #expect(revoked.status == 0, "\(revoked)")
        let stderr = try String(decoding: errors.fileHandleForReading.readAll(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 125, "\(stderr)")
        #expect(stderr.contains("could not be taken away") && stderr.contains("the sandbox was ended"), "\(stderr)")
        #expect(!FileManager.default.fileExists(atPath: box + "/survived"), "the command kept running with the revoked folder")
    }

    /// Examples/live-grant.py speaks the protocol without our binary: an
    /// open panel with a bookmark, then start and stop of that bookmark.
    @Test func thePythonExampleSpeaksTheProtocol() throws {
        let box = try container()
        let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../Examples/live-grant.py").standardized
        try FileManager.default.copyItem(atPath: example.path, toPath: box + "/live-grant.py")
        let script = """
            c="python3 $SANDBOX_CONTAINER/live-grant.py"
            p=$($c open-panel --prompt notes -o "$SANDBOX_CONTAINER/b") || exit 9
            cat "$p/note.txt"
            q=$($c start-accessing "$SANDBOX_CONTAINER/b") || exit 8
            echo "$p $q"
            $c stop-accessing "$SANDBOX_CONTAINER/b" && echo stopped
            $c stop-accessing "$SANDBOX_CONTAINER/b"; echo "again $?"
            """
        let result = try run(["--picker", picker], script)
        #expect(result.stdout == "picked bytes\n/run/sandboxed-run/grants/1 /run/sandboxed-run/grants/1\nstopped\nagain 6\n", "\(result)")
        #expect(try resolve(box + "/b").status == 0)
    }
}

