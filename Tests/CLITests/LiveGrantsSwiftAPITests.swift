import Foundation
import Testing

/// The Swift API (`SecurityScope`, `OpenPanel`, `SecurityScopedURL`) as an
/// app sees it: Examples/ScopedNotes, written only against it, runs the same
/// code unconfined (the local ledger) and under `run` (the launcher's broker).
@Suite struct LiveGrantsSwiftAPITests {
    let home = CLI.Home()
    var folder: String { home.path + "/Notes" }
    var picker: String { home.path + "/picker" }
    var pickerCount: String { home.path + "/picker-runs" }
    static let app = "com.example.scoped-notes"
    static let example = (CLI.binary as NSString).deletingLastPathComponent + "/scoped-notes"

    init() throws {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: folder + "/note.txt", contents: Data("picked bytes\n".utf8))
        let script = "#!/bin/sh\necho x >> '\(pickerCount)'\nprintf '%s\\n' '\(folder)'\n"
        _ = FileManager.default.createFile(atPath: picker, contents: Data(script.utf8), attributes: [.posixPermissions: 0o755])
    }

    var pickerRuns: Int {
        ((try? String(contentsOfFile: pickerCount, encoding: .utf8)) ?? "").split(separator: "\n").count
    }

    /// A policy with the writer's system paths, the example binary, and `keys` set to true.
    func policy(keys: [String]) -> String {
        let path = home.path + "/policy-\(keys.count).plist"
        let entries = keys.map { "<key>\($0)</key><true/>" }.joined()
        let plist = """
            <?xml version="1.0" encoding="UTF-8"?>
            <plist version="1.0"><dict><key>com.apple.security.app-sandbox</key><true/>\(entries)
            <key>org.sandboxed-run.system-paths.read-execute</key>
            <array><string>/usr</string><string>/bin</string><string>/lib</string><string>/lib64</string><string>\(Self.example)</string></array>
            <key>org.sandboxed-run.system-paths.read-only</key>
            <array><string>/etc/ld.so.cache</string></array>
            </dict></plist>
            """
        _ = FileManager.default.createFile(atPath: path, contents: Data(plist.utf8))
        return path
    }

    static let liveKeys = ["com.apple.security.files.user-selected.read-write", "com.apple.security.files.bookmarks.app-scope"]

    /// The example unconfined, with the test's home as its environment.
    func unconfined(_ arguments: [String], environment extra: [String: String] = [:]) throws -> CLI.Result {
        try CLI.program(Self.example, arguments, environment: home.environment.merging(extra) { $1 })
    }

    /// The example as the command of `run`.
    func sandboxed(_ arguments: [String], options: [String] = [], keys: [String] = LiveGrantsSwiftAPITests.liveKeys) throws -> CLI.Result {
        try CLI.run(["run", "--app", Self.app, "--policy", policy(keys: keys)] + options + ["--", Self.example] + arguments, home: home)
    }

    func container() throws -> String {
        let result = try CLI.run(["run", "--app", Self.app, "--", "/bin/sh", "-c", "printf %s \"$SANDBOX_CONTAINER\""], home: home)
        #expect(result.status == 0 && result.stdout.hasPrefix("/"), "\(result)")
        return result.stdout
    }

    func resolve(_ file: String) throws -> CLI.Result {
        try CLI.run(["resolve", "--app", Self.app, file], home: home)
    }

    static let opened = "reached: picked bytes\noutstanding: 1\nstopped, outstanding: 0\n"

    /// Unconfined: the open panel asks through the picker the app was given
    /// and records the grant in the user's ledger; a later run resolves the
    /// saved bookmark; stop ends the URL's access count (nothing confines the
    /// process, so the folder stays reachable); a moved folder resolves stale
    /// and the renewed bookmark is saved; a revoked one is a typed error.
    @Test func theExampleRunsUnconfinedOnTheLocalLedger() throws {
        let before = try unconfined(["open"])
        #expect(before.status == 2 && before.stderr.contains("notes.bookmark does not exist"), "\(before)")
        let picked = try unconfined(["pick", "--picker", picker])
        #expect(picked.status == 0 && picked.stdout == "picked: picked bytes\nwrote a note\n", "\(picked)")
        #expect((try? String(contentsOfFile: folder + "/from-scoped-notes.txt", encoding: .utf8)) == "kept by scoped-notes\n")
        #expect(try resolve(home.path + "/notes.bookmark").status == 0, "a bookmark of the app, in the ledger")
        let opened = try unconfined(["open"])
        #expect(opened.status == 0 && opened.stdout == Self.opened + "after stop: reachable\n", "\(opened)")
        // Moved: stale, renewed and saved; the next run is fresh.
        try FileManager.default.moveItem(atPath: folder, toPath: home.path + "/Moved")
        let moved = try unconfined(["open"])
        #expect(moved.status == 0 && moved.stdout == "the folder moved: bookmark renewed\n" + Self.opened + "after stop: reachable\n", "\(moved)")
        #expect(try unconfined(["open"]).stdout == Self.opened + "after stop: reachable\n")
        #expect(try CLI.run(["grants", "revoke", "--app", Self.app], home: home).status == 0)
        let revoked = try unconfined(["open"])
        #expect(revoked.status == 2 && revoked.stderr.contains("was revoked"), "\(revoked)")
        #expect(pickerRuns == 1)
    }

    /// The same binary under `run --picker`: the folder picked mid-run is
    /// reached at once, the bookmark lands in the container ($HOME there), a
    /// later run with no --grant and no picker reaches it again through
    /// startAccessing, and the stop cuts access.
    @Test func theExampleRunsInASandboxThroughTheBroker() throws {
        let picked = try sandboxed(["pick"], options: ["--picker", picker])
        #expect(picked.status == 0 && picked.stdout == "picked: picked bytes\nwrote a note\n", "\(picked)")
        #expect((try? String(contentsOfFile: folder + "/from-scoped-notes.txt", encoding: .utf8)) == "kept by scoped-notes\n")
        let box = try container()
        #expect(try resolve(box + "/notes.bookmark").status == 0, "sealed for the app, written by the app into its container")
        let opened = try sandboxed(["open"])
        #expect(opened.status == 0 && opened.stdout == Self.opened + "after stop: unreachable\n", "\(opened)")
        // Moved: the broker follows it; the renewed bookmark surfaces as isStale and the app saves it.
        let bytes = try Data(contentsOf: URL(fileURLWithPath: box + "/notes.bookmark"))
        try FileManager.default.moveItem(atPath: folder, toPath: home.path + "/Moved")
        let moved = try sandboxed(["open"])
        #expect(moved.status == 0 && moved.stdout == "the folder moved: bookmark renewed\n" + Self.opened + "after stop: unreachable\n", "\(moved)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: box + "/notes.bookmark")) != bytes)
        let fresh = try resolve(box + "/notes.bookmark")
        #expect(fresh.status == 0 && fresh.stdout.contains("Moved"), "\(fresh)")
        // Revoked: the broker's outcome as a typed error.
        #expect(try CLI.run(["grants", "revoke", "--app", Self.app], home: home).status == 0)
        let revoked = try sandboxed(["open"])
        #expect(revoked.status == 2 && revoked.stderr.contains("was revoked"), "\(revoked)")
        #expect(pickerRuns == 1)
    }

    /// Inside a sandbox the API never falls back to a ledger of the app's own:
    /// a sandbox without the broker's descriptor is "not available", and no
    /// state is made in the container (HOME there).
    @Test func aSandboxWithoutTheBrokerIsNotAvailableAndNeverLocal() throws {
        let panel = try sandboxed(["pick", "--picker", picker], keys: [])
        #expect(panel.status == 2 && panel.stderr.contains("live grants are not available here"), "\(panel)")
        let box = try container()
        _ = FileManager.default.createFile(atPath: box + "/notes.bookmark", contents: Data("SRBM".utf8))
        let open = try sandboxed(["open"], keys: [])
        #expect(open.status == 2 && open.stderr.contains("live grants are not available here"), "\(open)")
        #expect(!FileManager.default.fileExists(atPath: box + "/.local"), "no ledger of the app's own")
        #expect(pickerRuns == 0)
    }

    /// SANDBOXED_RUN_BROKER_FD naming anything but a SOCK_SEQPACKET unix
    /// socket (a stream or datagram socket whose other end listens, a pipe,
    /// a file, a number that is no descriptor) is a typed error: the bookmark's
    /// bytes are never sent there, no picker runs, and nothing falls back to
    /// the local ledger.
    @Test func aBrokerVariableThatNamesNoBrokerSocketFailsClosed() throws {
        let picked = try unconfined(["pick", "--picker", picker])
        #expect(picked.status == 0, "\(picked)")
        let code = """
            import os, socket, subprocess, sys
            example, kind = sys.argv[1], sys.argv[2]
            if kind in ("stream", "dgram"):
                a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM if kind == "stream" else socket.SOCK_DGRAM)
                fd = a.fileno()
            elif kind == "pipe":
                r, w = os.pipe(); fd = w
            elif kind == "file":
                fd = os.open(os.environ["HOME"] + "/notes.bookmark", os.O_RDONLY)
            else:
                fd = 77
            env = dict(os.environ, SANDBOXED_RUN_BROKER_FD=str(fd))
            for action in (["open"], ["pick", "--picker", sys.argv[3]]):
                try:
                    p = subprocess.run([example] + action, env=env, pass_fds=[fd] if fd != 77 else [], capture_output=True, text=True, timeout=20)
                    print(p.returncode, p.stderr.strip().split(": ", 1)[-1])
                except subprocess.TimeoutExpired:
                    print("hung waiting for an answer")
            if kind in ("stream", "dgram"):
                b.setblocking(False)
                try: print("received", len(b.recv(65536)))
                except BlockingIOError: print("received nothing")
            """
        for kind in ["stream", "dgram", "pipe", "file", "none"] {
            let result = try CLI.program("/usr/bin/python3", ["-c", code, Self.example, kind, picker], environment: home.environment)
            let lines = result.stdout.split(separator: "\n").map(String.init)
            try #require(lines.count >= 2, "\(kind): \(result)")
            for line in lines.prefix(2) {
                // A number that is no descriptor is said to be closed; anything else, to be no broker's socket.
                let said = kind == "none" ? "is not open in this process" : "not a live-grant broker's socket"
                #expect(line.hasPrefix("2 ") && line.contains(said) && line.contains("pass_fds"), "\(kind): \(line)")
            }
            if kind == "stream" || kind == "dgram" { #expect(lines.last == "received nothing", "\(kind): \(lines)") }
        }
        for value in ["", "2", "abc", "-5", "99999999999"] {
            let result = try unconfined(["open"], environment: ["SANDBOXED_RUN_BROKER_FD": value])
            #expect(result.status == 2 && result.stderr.contains("is not a descriptor number above 2"), "\(value): \(result)")
        }
        #expect(pickerRuns == 1, "only the first, unconfined pick asked")
    }
}
