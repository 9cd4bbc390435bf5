import Foundation
import Testing

/// scripts/desktop-picker, the `run --picker` program that opens the desktop's
/// folder dialog. The prompt it gets is the app's: it must reach the dialog as
/// one plain-text title, whatever it holds; cancel prints nothing.
@Suite struct DesktopPickerTests {
    static let script = ManualTests.repository.appendingPathComponent("scripts/desktop-picker").path
    let home = CLI.Home()
    var bin: String { home.path + "/bin" }
    var recorded: String { home.path + "/argv" }

    init() throws {
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
    }

    /// A fake dialog program on PATH: records its arguments (NUL-separated),
    /// then prints `reply` and exits 0, or exits `status`.
    func fake(_ name: String, reply: String, status: Int = 0) {
        let body = "#!/bin/sh\nprintf '%s\\0' \"$@\" > '\(recorded)'\n"
            + (status == 0 ? "printf '%s' '\(reply)'\n" : "exit \(status)\n")
        _ = FileManager.default.createFile(atPath: bin + "/" + name, contents: Data(body.utf8), attributes: [.posixPermissions: 0o755])
    }

    /// Runs the picker with `prompt` given as raw bytes (they need not be UTF-8).
    func pick(_ prompt: [UInt8], environment: [String: String] = [:]) throws -> (result: CLI.Result, argv: [String]) {
        try? FileManager.default.removeItem(atPath: recorded)
        let escaped = prompt.map { "\\" + String($0, radix: 8) }.joined()
        let env = ["PATH": bin, "HOME": home.path, "LANG": "C.UTF-8"].merging(environment) { $1 }
        // PATH is the fake dialogs' folder alone: the real ones, if installed, are never run here.
        let result = try CLI.program("/bin/sh", ["-c", "exec \"$0\" \"$(printf \"$1\")\"", Self.script, escaped], environment: env)
        let argv = (try? Data(contentsOf: URL(fileURLWithPath: recorded))).map {
            $0.split(separator: 0, omittingEmptySubsequences: false).dropLast().map { String(decoding: $0, as: UTF8.self) }
        } ?? []
        return (result, argv)
    }

    func pick(_ prompt: String, environment: [String: String] = [:]) throws -> (result: CLI.Result, argv: [String]) {
        try pick(Array(prompt.utf8), environment: environment)
    }

    @Test func thePromptReachesZenityAsOnePlainTitleWord() throws {
        fake("zenity", reply: "/home/someone/Notes & more\n")
        let markup = try pick("<b>x</b> & --help")
        #expect(markup.argv == ["--file-selection", "--directory", "--title=sandboxed-run: <b>x</b> & --help"])
        #expect(markup.result.status == 0 && markup.result.stdout == "/home/someone/Notes & more\n", "\(markup.result)")
        // A prompt that is an option stays inside the title's word.
        #expect(try pick("--help").argv.last == "--title=sandboxed-run: --help")
        #expect(try pick("--filename=/etc --save").argv == ["--file-selection", "--directory", "--title=sandboxed-run: --filename=/etc --save"])
        // Lines, bidirectional overrides, escape sequences and bytes that are not UTF-8 are replaced.
        #expect(try pick("a\nb\u{202E}c\u{1B}[2Jd").argv.last == "--title=sandboxed-run: a\u{FFFD}b\u{FFFD}c\u{FFFD}[2Jd")
        #expect(try pick([0x61, 0xFF, 0xFE, 0x62]).argv.last == "--title=sandboxed-run: a\u{FFFD}\u{FFFD}b")
        // Very long text is cut; an empty prompt still says who asks.
        #expect(try pick(String(repeating: "x", count: 5000)).argv.last == "--title=sandboxed-run: " + String(repeating: "x", count: 300) + "…")
        #expect(try pick("").argv.last == "--title=sandboxed-run: choose a folder")
    }

    @Test func kdialogGetsTheSameTitleAndStartsAtHome() throws {
        fake("kdialog", reply: "/home/someone/Notes\n")
        let chosen = try pick("<i>x</i> --getopenfilename", environment: ["SANDBOXED_RUN_DESKTOP_PICKER": "kdialog"])
        #expect(chosen.argv == ["--title=sandboxed-run: <i>x</i> --getopenfilename", "--getexistingdirectory", home.path])
        #expect(chosen.result.status == 0 && chosen.result.stdout == "/home/someone/Notes\n", "\(chosen.result)")
        // On KDE kdialog comes first, with zenity present too.
        fake("zenity", reply: "/from/zenity\n")
        #expect(try pick("x", environment: ["XDG_CURRENT_DESKTOP": "KDE"]).result.stdout == "/home/someone/Notes\n")
        #expect(try pick("x", environment: ["XDG_CURRENT_DESKTOP": "GNOME"]).result.stdout == "/from/zenity\n")
    }

    /// Cancel, and anything the launcher could not take: nothing printed, not 0.
    @Test func cancelAndBadAnswersPrintNothing() throws {
        fake("zenity", reply: "", status: 1)
        let cancelled = try pick("x")
        #expect(cancelled.result.status == 1 && cancelled.result.stdout == "", "\(cancelled.result)")
        for reply in ["relative/path\n", "/a\n/b\n", "\n", "/" + String(repeating: "a", count: 4095) + "\n"] {
            fake("zenity", reply: reply)
            let bad = try pick("x")
            #expect(bad.result.status == 2 && bad.result.stdout == "", "\(reply.prefix(20)): \(bad.result)")
            #expect(bad.result.stderr.contains("one absolute path"), "\(bad.result.stderr)")
        }
        try FileManager.default.removeItem(atPath: bin + "/zenity")
        let nothing = try pick("x", environment: ["DBUS_SESSION_BUS_ADDRESS": "", "XDG_RUNTIME_DIR": ""])
        #expect(nothing.result.status == 2 && nothing.result.stdout == "", "\(nothing.result)")
        #expect(nothing.result.stderr.contains("install zenity or kdialog"), "\(nothing.result.stderr)")
        #expect(try pick("x", environment: ["SANDBOXED_RUN_DESKTOP_PICKER": "xmessage"]).result.status == 2)
        #expect(try CLI.program(Self.script, ["a", "b"]).status == 2, "one argument only")
    }

    /// The portal answers with URIs: only file:// on this machine is taken, %XX decoded.
    @Test func portalURIsBecomeLocalPathsOrNothing() throws {
        let code = """
            import importlib.machinery, importlib.util, sys
            loader = importlib.machinery.SourceFileLoader("picker", sys.argv[1])
            spec = importlib.util.spec_from_loader("picker", loader)
            picker = importlib.util.module_from_spec(spec); loader.exec_module(picker)
            for uri in sys.argv[2:]:
                print(repr(picker.path_from_uri(uri)))
            """
        let uris = ["file:///home/a/Notes%20%26%20more", "file://localhost/srv/x", "FILE:///%C3%A9t%C3%A9", "file:///bad%FF",
                    "https://example.com/x", "file://otherhost/x", "file:relative", "file:///a%0Ab", "file:///a%00b",
                    "file:///a?query", "sftp:///x", "file://"]
        let result = try CLI.program("/usr/bin/python3", ["-I", "-B", "-c", code, Self.script] + uris)
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.split(separator: "\n") == [
            "b'/home/a/Notes & more'", "b'/srv/x'", "b'/\\xc3\\xa9t\\xc3\\xa9'", "b'/bad\\xff'",
            "None", "None", "None", "None", "None", "None", "None", "None",
        ], "\(result.stdout)")
    }
}

/// The real zenity under Xvfb, driven with xdotool as a person would: the
/// window's title is the prompt as typed, a screenshot shows it, Enter on a
/// typed path chooses it, Escape cancels.
@Suite struct DesktopPickerXvfbTests {
    static let tools = ["/usr/bin/zenity", "/usr/bin/Xvfb", "/usr/bin/xdotool", "/usr/bin/import", "/usr/bin/identify", "/usr/bin/python3"]
    static let available = tools.allSatisfy { FileManager.default.isExecutableFile(atPath: $0) }
    let home = CLI.Home()
    var folder: String { home.path + "/Notes & more" }

    init() throws {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: folder + "/note.txt", contents: Data("picked bytes\n".utf8))
        // GNOME's look: the dialog's title in a header bar, drawn by GTK itself (Xvfb has no window manager);
        // no Recent view, in which a typed location is not taken.
        try FileManager.default.createDirectory(atPath: home.path + "/config/gtk-3.0", withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: home.path + "/config/gtk-3.0/settings.ini", contents: Data("[Settings]\ngtk-dialogs-use-header=true\ngtk-recent-files-enabled=false\n".utf8))
    }

    /// Starts Xvfb on a free display, runs `command` in the background, waits
    /// for the dialog, records its title, types `typed` (if any), takes a
    /// screenshot, presses `key`, and waits for the command's status.
    static let driver = #"""
        set -u
        work=$1 typed=$2 key=$3; shift 3
        cd "$HOME"  # where the dialog opens
        Xvfb -displayfd 3 -screen 0 1280x900x24 -nolisten tcp 3>"$work/display" >/dev/null 2>&1 &
        # KILL: the test runner may have SIGTERM ignored, and an ignored signal stays so across exec.
        # Without its X server a dialog left over ends too.
        trap '{ kill -KILL $(jobs -p); wait; } 2>/dev/null' EXIT
        for _ in $(seq 100); do [ -s "$work/display" ] && break; sleep 0.1; done
        export DISPLAY=:$(cat "$work/display")
        ( "$@" >"$work/out" 2>"$work/err"; echo $? >"$work/status" ) &
        window=$(timeout -s KILL 30 xdotool search --sync --name '^sandboxed-run: ' | head -1) || { echo "no dialog"; exit 1; }
        xdotool getwindowname "$window" >"$work/title"
        sleep 1  # drawn, and the file list loaded
        xdotool windowfocus --sync "$window"
        if [ -n "$typed" ]; then
            # Ctrl+L opens the location entry first: a typed "/" opens it too, but swallows the next key.
            xdotool key ctrl+l && sleep 0.5 && xdotool key ctrl+a && xdotool type --delay 30 "$typed" && sleep 1
        fi
        import -window "$window" "$work/shot.png"
        xdotool key "$key"
        for _ in $(seq 200); do [ -s "$work/status" ] && exit 0; sleep 0.1; done
        echo "the dialog did not end"; exit 1
        """#

    struct Outcome {
        let status: String, stdout: String, stderr: String, title: String, colours: Int, width: Int
    }

    /// `screenshot`: the picture for docs/images, copied to $SANDBOXED_RUN_SCREENSHOT when set.
    func drive(typing typed: String, key: String, _ command: [String], screenshot: Bool = false) throws -> Outcome {
        let work = home.path + "/work-\(key)"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        let env = home.environment.merging(["XDG_CONFIG_HOME": home.path + "/config", "GSETTINGS_BACKEND": "memory", "NO_AT_BRIDGE": "1"]) { $1 }
        let driven = try CLI.program("/usr/bin/timeout", ["-s", "KILL", "90", "/bin/bash", "-c", Self.driver, "driver", work, typed, key] + command,
                                     environment: env)
        #expect(driven.status == 0, "\(driven)")
        func read(_ name: String) -> String { (try? String(contentsOfFile: work + "/" + name, encoding: .utf8)) ?? "" }
        // Distinct colours and width: an empty or black capture has one colour.
        let shape = try CLI.program("/usr/bin/identify", ["-format", "%k %w", work + "/shot.png"]).stdout.split(separator: " ").compactMap { Int($0) }
        if let copy = ProcessInfo.processInfo.environment["SANDBOXED_RUN_SCREENSHOT"], screenshot {
            try? FileManager.default.removeItem(atPath: copy)
            try FileManager.default.copyItem(atPath: work + "/shot.png", toPath: copy)
        }
        return Outcome(status: read("status"), stdout: read("out"), stderr: read("err"), title: read("title"),
                       colours: shape.first ?? 0, width: shape.count > 1 ? shape[1] : 0)
    }

    @Test(.enabled(if: available, "needs zenity, Xvfb, xdotool, ImageMagick and python3 (scripts/install-deps)"))
    func zenityShowsThePromptLiterallyAndEnterChoosesTheTypedFolder() throws {
        let chosen = try drive(typing: folder, key: "Return", [DesktopPickerTests.script, "<b>x</b> & --help"])
        #expect(chosen.title == "sandboxed-run: <b>x</b> & --help\n")
        #expect(chosen.status == "0\n" && chosen.stdout == folder + "\n", "\(chosen)")
        #expect(chosen.colours > 16 && chosen.width > 400, "the screenshot is not blank: \(chosen)")
    }

    @Test(.enabled(if: available, "needs zenity, Xvfb, xdotool, ImageMagick and python3 (scripts/install-deps)"))
    func escapeCancelsAndPrintsNothing() throws {
        let cancelled = try drive(typing: "", key: "Escape", [DesktopPickerTests.script, "--help"])
        #expect(cancelled.title == "sandboxed-run: --help\n")
        #expect(cancelled.status == "1\n" && cancelled.stdout == "", "\(cancelled)")
    }

    /// The whole way: the command's open panel, the launcher's prompt, the
    /// dialog, the folder typed, and the folder reachable in the sandbox.
    @Test(.enabled(if: available && getuid() == 0, "needs root (the private view), zenity, Xvfb, xdotool, ImageMagick (scripts/install-deps)"))
    func anOpenPanelThroughTheDesktopDialog() throws {
        let script = #"p=$("$SANDBOXED_RUN" open-panel --prompt '<b>x</b> & --help') && echo "at $p" && cat "$p/note.txt""#
        let run = try drive(typing: folder, key: "Return",
                            [CLI.binary, "run", "--app", "com.example.desktop", "--picker", DesktopPickerTests.script, "--", "/bin/sh", "-c", script],
                            screenshot: true)
        #expect(run.title == "sandboxed-run: com.example.desktop asks for a folder (read-write): <b>x</b> & --help\n")
        #expect(run.status == "0\n" && run.stdout == "at /run/sandboxed-run/grants/1\npicked bytes\n", "\(run)")
    }
}
