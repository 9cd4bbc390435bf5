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
        FileManager.default.createFile(atPath: folder + "/note.txt", contents: Data("picked bytes\n".utf8))
        try writePicker(printing: folder)
    }

    /// A picker that records its prompt and prints `path` (or exits `status`).
    func writePicker(printing path: String, status: Int = 0) throws {
        let script = "#!/bin/sh\nprintf '%s' \"$1\" >> '\(asked)'\necho x >> '\(asked).count'\n"
            + (status == 0 ? "printf '%s\\n' '\(path)'\n" : "exit \(status)\n")
        FileManager.default.createFile(atPath: picker, contents: Data(script.utf8), attributes: [.posixPermissions: 0o755])
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

    @Test func openPanelWithoutAPickerFailsAtOnceAndGrantsNothing() throws {
        let result = try run([], "\"$SANDBOXED_RUN\" open-panel; echo \"status $?\"; echo \"fd ${SANDBOXED_RUN_BROKER_FD-none}\"")
        #expect(result.stdout == "status 3\nfd none\n", "\(result)")
        #expect(result.stderr.contains("live grants are not available here"), "\(result.stderr)")
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
        #expect(lines.first == "with-fd 5 descriptors or credentials sent with a request are refused", "\(result)")
        #expect(lines.last == "plain 0 /run/sandboxed-run/grants/1", "\(result)")
        #expect(pickerRuns == 1, "only the plain request reached the picker")
    }

    @Test func oversizedAndMalformedRequestsAreRefusedAndTheSandboxKeepsWorking() throws {
        let code = Self.client + "\n" + """
            ask("oversized", request(prompt=b"a" * 512, extra=b"b" * 4000))
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
        #expect(lines.first?.contains("at most 518 bytes") == true, "\(lines)")
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
        #expect(lines[0].hasPrefix("path-after 5 ") && lines[1].hasPrefix("path-op 5 "), "\(lines)")
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
}
