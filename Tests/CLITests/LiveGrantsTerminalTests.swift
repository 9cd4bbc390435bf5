import Foundation
import Testing
import CSyscalls

/// A pty standing in for the user's terminal (as `UserTerminal` in
/// SandboxTests): the test holds the master, as a terminal emulator would,
/// a thread keeps everything shown on it, and the launcher runs with the
/// terminal side as its stdin, stdout and stderr.
final class PersonAtTerminal: @unchecked Sendable {
    let master: Int32
    let terminal: Int32
    /// What the reader thread shares with the test, apart from `self`: a
    /// thread holding `self` would keep it alive, and its pty open, for good.
    private final class Screen: @unchecked Sendable {
        let lock = NSLock()
        var shown: [UInt8] = []
        var stopping = false
        var paused = false
        let stopped = DispatchSemaphore(value: 0)
    }
    private let screen = Screen()
    private var lock: NSLock { screen.lock }
    private var shown: [UInt8] { screen.shown }
    private var stopping: Bool {
        get { screen.stopping }
        set { screen.stopping = newValue }
    }
    private var stopped: DispatchSemaphore { screen.stopped }

    init() throws {
        var master: Int32 = -1
        var terminal: Int32 = -1
        try #require(csb_open_pty(&master, &terminal) == 0)
        self.master = master
        self.terminal = terminal
        // Wide enough for scratch paths on one line, as a terminal window would be.
        var size = winsize(ws_row: 50, ws_col: 240, ws_xpixel: 0, ws_ypixel: 0)
        _ = ioctl(terminal, UInt(TIOCSWINSZ), &size)
        Thread { [screen, master] in
            var buffer = [UInt8](repeating: 0, count: 65536)
            while !screen.lock.withLock({ screen.stopping }) {
                var fd = pollfd(fd: master, events: Int16(POLLIN), revents: 0)
                guard poll(&fd, 1, 50) > 0 else { continue }
                let count = read(master, &buffer, buffer.count)
                if count > 0 { screen.lock.withLock { screen.shown += buffer[..<count] } }
            }
            screen.stopped.signal()
        }.start()
    }

    deinit {
        lock.withLock { stopping = true }
        stopped.wait()
        close(master)
        close(terminal)
    }

    var bytes: [UInt8] { lock.withLock { shown } }
    var output: String { String(decoding: bytes, as: UTF8.self) }

    func count(_ text: String) -> Int { output.components(separatedBy: text).count - 1 }

    /// Waits until `text` was shown `times` times.
    func waitFor(_ text: String, times: Int = 1, seconds: Double = 20) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if count(text) >= times { return true }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return count(text) >= times
    }

    func type(_ text: String) {
        _ = text.utf8CString.withUnsafeBufferPointer { write(master, $0.baseAddress, $0.count - 1) }
    }

    /// The launcher, on this terminal; as uid and gid 65534 when `nobody`.
    func start(_ arguments: [String], home: CLI.Home, in directory: String? = nil, nobody: Bool = false) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: nobody ? "/usr/bin/setpriv" : CLI.binary)
        process.arguments = (nobody ? ["--reuid=65534", "--regid=65534", "--clear-groups", CLI.binary] : []) + arguments
        process.environment = home.environment.merging(["TERM": "xterm"]) { $1 }
        process.currentDirectoryURL = URL(fileURLWithPath: directory ?? home.path)
        let handle = FileHandle(fileDescriptor: terminal, closeOnDealloc: false)
        process.standardInput = handle
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        return process
    }

    /// Waits for the launcher to end, at most `seconds`, then kills it.
    func finish(_ process: Process, seconds: Double = 60) -> Int32? {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        guard !process.isRunning else {
            process.terminate()
            process.waitUntilExit()
            return nil
        }
        return process.terminationStatus
    }
}

/// What a terminal emulator's Enter and Ctrl-C send, given what it was
/// told so far: the kitty keyboard flags (a stack: push `CSI > f u`, pop
/// `CSI < n u`, set `CSI = f ; m u`) and xterm's modifyOtherKeys
/// (`CSI > 4 ; n m`). A pty has no emulator, so the test plays its part.
struct EmulatedKeyboard {
    var kitty: [Int] = [0]
    var otherKeys = 0

    init(_ shown: [UInt8]) {
        var index = 0
        while index + 1 < shown.count {
            guard shown[index] == 0x1B, shown[index + 1] == UInt8(ascii: "[") else { index += 1; continue }
            var end = index + 2
            while end < shown.count, (0x20...0x3F).contains(shown[end]) { end += 1 }
            guard end < shown.count else { break }
            let body = String(decoding: shown[(index + 2)..<end], as: UTF8.self)
            let marker = body.first.map(String.init) ?? ""
            let numbers = body.dropFirst().split(separator: ";", omittingEmptySubsequences: false).map { Int($0) }
            switch (marker, shown[end]) {
            case (">", UInt8(ascii: "u")): kitty.append(numbers.first.flatMap { $0 } ?? 0)
            case ("<", UInt8(ascii: "u")):
                for _ in 0..<(numbers.first.flatMap { $0 } ?? 1) where kitty.count > 1 { kitty.removeLast() }
                if kitty.count == 1 { kitty = [0] }
            case ("=", UInt8(ascii: "u")):
                let flags = numbers.first.flatMap { $0 } ?? 0
                switch numbers.count > 1 ? numbers[1] ?? 1 : 1 {
                case 2: kitty[kitty.count - 1] |= flags
                case 3: kitty[kitty.count - 1] &= ~flags
                default: kitty[kitty.count - 1] = flags
                }
            case (">", UInt8(ascii: "m")) where numbers.first == 4:
                otherKeys = numbers.count > 1 ? numbers[1] ?? 0 : 0
            default: break
            }
            index = end + 1
        }
    }

    /// Flag 8 (every key as an escape code) turns Enter into `CSI 13 u`.
    var enter: String { kitty.last! & 8 != 0 ? "\u{1B}[13u" : "\r" }
    /// Any kitty flag, or modifyOtherKeys 2, turns Ctrl-C into an escape sequence.
    var ctrlC: String { kitty.last! != 0 ? "\u{1B}[99;5u" : otherKeys >= 2 ? "\u{1B}[27;5;99~" : "\u{03}" }
}

/// The terminal picker: without `--picker`, an open panel asks the person on
/// the terminal the launcher relays. The command's output is held back while
/// the question is up, keys typed then never reach the command, Ctrl-C only
/// cancels, and what the command printed before cannot hide or rewrite the
/// question. Live grants need the private view: in the host view the open
/// panel answers "unavailable" without asking.
@Suite struct LiveGrantsTerminalTests {
    let home = CLI.Home()
    /// Where the launcher runs, and the browser starts: Picked is the one folder there, highlighted.
    var desk: String { home.path + "/Desk" }
    var folder: String { desk + "/Picked" }
    static let app = "com.example.live"
    /// The browser's last line, drawn once it takes keys.
    static let question = "q: cancel"

    init() throws {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: folder + "/note.txt", contents: Data("picked bytes\n".utf8))
    }

    func start(_ terminal: PersonAtTerminal, _ script: String, options: [String] = [], nobody: Bool = false) throws -> Process {
        try terminal.start(["run", "--app", Self.app] + options + ["--", "/bin/sh", "-c", script], home: home, in: desk, nobody: nobody)
    }

    var grants: String { grants(nobody: false) }

    /// `grants list`, as the user the state belongs to.
    func grants(nobody: Bool) -> String {
        let prefix = nobody ? ["--reuid=65534", "--regid=65534", "--clear-groups", CLI.binary] : []
        return (try? CLI.program(nobody ? "/usr/bin/setpriv" : CLI.binary, prefix + ["grants", "list"], environment: home.environment).stdout) ?? "?"
    }

    static let canBecomeNobody = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")

    @Test func aFolderTypedAtTheTerminalIsReachableInTheSameRunAndLinksAreShown() throws {
        try typedAtTheTerminal(nobody: false)
    }

    /// Unprivileged, the launcher cannot open a description of its own of
    /// the terminal (root's pty): the relay shares the user's, and the question too.
    @Test(.enabled(if: canBecomeNobody, "needs root (to become uid 65534) and setpriv"))
    func aFolderTypedAtTheTerminalIsReachableUnprivileged() throws {
        try typedAtTheTerminal(nobody: true)
    }

    func typedAtTheTerminal(nobody: Bool) throws {
        let terminal = try PersonAtTerminal()
        // "link" sorts before "Picked": it is highlighted, and the browser shows where it leads.
        try FileManager.default.createSymbolicLink(atPath: desk + "/link", withDestinationPath: "./Picked")
        if nobody { #expect(try CLI.program("/bin/chown", ["-R", "65534:65534", home.path]).status == 0) }
        let script = """
            cat '\(folder)/note.txt' 2>/dev/null || echo before-refused
            p=$("$SANDBOXED_RUN" open-panel --prompt 'for the notes') || { echo "status $?"; exit 9; }
            echo "at $p"
            cat "$p/note.txt"
            echo written > "$p/new.txt" && echo write-ok
            """
        let process = try start(terminal, script, nobody: nobody)
        #expect(terminal.waitFor(Self.question), "\(terminal.output)")
        terminal.type(" ")
        let status = terminal.finish(process)
        let shown = terminal.output
        #expect(status == 0, "\(shown)")
        #expect(shown.contains("\(Self.app) asks for a folder, to read and write (read-write)."), "\(shown)")
        #expect(shown.contains("Its words: \u{201C}for the notes\u{201D}"), "\(shown)")
        // The link as a link, and where it leads as what Space chooses, as pick shows them.
        #expect(shown.contains("> link -> ./Picked (link)"), "\(shown)")
        #expect(shown.contains("space or Enter: choose \(folder)\u{1B}"), "\(shown)")
        #expect(shown.contains("Granted \(folder) (read-write) to \(Self.app)."), "\(shown)")
        #expect(shown.contains("before-refused"), "\(shown)")
        #expect(shown.contains("at /run/sandboxed-run/grants/1\r\npicked bytes\r\nwrite-ok"), "\(shown)")
        #expect((try? String(contentsOfFile: folder + "/new.txt", encoding: .utf8)) == "written\n")
        #expect(grants(nobody: nobody).contains(folder), "the grant is in the ledger")
    }

    /// The open panel's question is pick's browser, with its keys: `c`
    /// chooses the folder listed, and read-write, with a folder highlighted
    /// in it, asks first, showing it whole; any key but y goes back. A
    /// read-only request says so, and asks nothing for the folder listed.
    @Test func theFolderListedIsGrantedReadWriteOnlyAfterAYes() throws {
        let terminal = try PersonAtTerminal()
        let script = """
            p=$("$SANDBOXED_RUN" open-panel); echo "first $? $p"
            p=$("$SANDBOXED_RUN" open-panel --read-only); echo "second $? $p"
            """
        let process = try start(terminal, script)
        #expect(terminal.waitFor(Self.question), "\(terminal.output)")
        terminal.type("c")
        #expect(terminal.waitFor("y: yes, grant all of it"), "\(terminal.output)")
        terminal.type("n")
        #expect(terminal.waitFor("Not granted: choose again."), "\(terminal.output)")
        terminal.type("c")
        #expect(terminal.waitFor("y: yes, grant all of it", times: 2), "\(terminal.output)")
        terminal.type("y")
        #expect(terminal.waitFor("first 0 /run/sandboxed-run/grants/1"), "\(terminal.output)")
        #expect(terminal.waitFor("q: cancel", times: 3), "\(terminal.output)")
        terminal.type("c")
        #expect(terminal.finish(process) == 0, "\(terminal.output)")
        let shown = terminal.output
        #expect(shown.contains("Grant read-write access to this whole folder, and everything in it?"), "\(shown)")
        #expect(shown.contains("  \(desk)\u{1B}[0m"), "the folder is shown whole: \(shown.debugDescription)")
        #expect(shown.contains("It holds more than the highlighted Picked/"), "\(shown)")
        #expect(shown.contains("Granted \(desk) (read-write) to \(Self.app)."), "\(shown)")
        #expect(shown.contains("\(Self.app) asks for a folder, to read only (read-only)."), "\(shown)")
        #expect(shown.contains("Granted \(desk) (read-only) to \(Self.app)."), "\(shown)")
        #expect(shown.contains("second 0 /run/sandboxed-run/grants/2"), "\(shown)")
        #expect(terminal.count("y: yes, grant all of it") == 2, "the read-only grant asked: \(shown)")
    }

    /// A lone Esc, Ctrl-D and Ctrl-C each cancel (q too: the tests below): nothing granted, the
    /// command keeps running (Ctrl-C signals nobody: not the command, not the launcher).
    @Test func cancellingGrantsNothingAndTheCommandKeepsRunning() throws {
        let terminal = try PersonAtTerminal()
        let script = """
            for key in esc ctrl-d ctrl-c; do "$SANDBOXED_RUN" open-panel; echo "$key status $?"; done
            echo still-running
            ls /run/sandboxed-run/grants | wc -l
            """
        let process = try start(terminal, script)
        for (index, (key, name)) in [("\u{1B}", "esc"), ("\u{04}", "ctrl-d"), ("\u{03}", "ctrl-c")].enumerated() {
            #expect(terminal.waitFor(Self.question, times: index + 1), "\(name): \(terminal.output)")
            terminal.type(key)
            #expect(terminal.waitFor("\(name) status"), "\(name): \(terminal.output)")
        }
        let status = terminal.finish(process)
        let shown = terminal.output
        #expect(status == 0, "\(shown)")
        for name in ["esc", "ctrl-d", "ctrl-c"] { #expect(shown.contains("\(name) status 1\r\n"), "\(name): \(shown)") }
        #expect(shown.contains("ctrl-c status 1\r\nstill-running\r\n0\r\n"), "\(shown)")
        #expect(terminal.count("Cancelled: nothing granted.") == 3, "\(shown)")
        #expect(!grants.contains(folder))
    }

    /// What the command writes while the question is up is shown after it,
    /// none lost; the keys typed at the question never reach the command,
    /// though it reads its terminal all along.
    @Test func outputIsHeldBackAndTheAnswerNeverReachesTheCommand() throws {
        let terminal = try PersonAtTerminal()
        let script = """
            exec 3<&0
            cat <&3 > /tmp/typed &
            reader=$!
            (sleep 1; echo LATE-OUTPUT; i=0; while [ $i -lt 2000 ]; do echo "line $i of held output"; i=$((i+1)); done; echo LAST-LINE) &
            p=$("$SANDBOXED_RUN" open-panel) || exit 9
            echo "at $p"
            sleep 2
            kill $reader
            printf 'typed[%s]\\n' "$(cat /tmp/typed)"
            wait
            """
        let process = try start(terminal, script)
        #expect(terminal.waitFor(Self.question), "\(terminal.output)")
        // The command writes 50 KB meanwhile: none of it is shown while the question is up.
        Thread.sleep(forTimeInterval: 3)
        #expect(!terminal.output.contains("LATE-OUTPUT"), "\(terminal.output)")
        terminal.type(" ")
        #expect(terminal.waitFor("at /run/sandboxed-run/grants/1"), "\(terminal.output)")
        terminal.type("after-the-question\n")
        let status = terminal.finish(process)
        let shown = terminal.output
        #expect(status == 0, "\(shown)")
        #expect(shown.contains("typed[after-the-question]"), "\(shown)")
        #expect(!shown.contains("typed[" + folder), "\(shown)")
        let granted = try #require(shown.range(of: "Granted \(folder)"), "\(shown)")
        let late = try #require(shown.range(of: "LATE-OUTPUT"), "\(shown)")
        #expect(granted.upperBound <= late.lowerBound, "the held output came after the question")
        for index in [0, 999, 1999] { #expect(shown.contains("line \(index) of held output\r\n"), "line \(index)") }
        #expect(shown.contains("LAST-LINE"))
    }

    /// The command tries to hide or rewrite the question: escape sequences in
    /// its --prompt text, and output just before it asks that leaves a half
    /// line, an OSC string open (it would swallow what follows), invisible
    /// and black-on-black text, a hidden cursor, a scroll region, redefined
    /// default colours, bracketed paste. Its text reaches the terminal
    /// escaped, and the terminal is reset before the question's first line.
    @Test func theCommandCannotForgeOrHideTheQuestion() throws {
        let terminal = try PersonAtTerminal()
        let hostile = "\u{1B}[2J\u{1B}[H\u{1B}]0;title\u{07}\rGranted /etc (read-write)\n\u{1B}[8m"
        let before = "half line \u{1B}]11;rgb:00/00/00\u{1B}\\\u{1B}]10;rgb:00/00/00\u{1B}\\\u{1B}[8m\u{1B}[30;40m\u{1B}[?25l\u{1B}[3;4r\u{1B}[?2004h\u{1B}]0;open-title "
        let script = """
            printf '%s' "$BEFORE"
            "$SANDBOXED_RUN" open-panel --prompt "$HOSTILE"; echo "status $?"
            """
        let process = try start(terminal, script, options: ["--setenv", "HOSTILE=" + hostile, "--setenv", "BEFORE=" + before])
        #expect(terminal.waitFor(Self.question), "\(terminal.output)")
        terminal.type("q")
        #expect(terminal.finish(process) == 0, "\(terminal.output)")
        let shown = terminal.bytes
        let text = String(decoding: shown, as: UTF8.self)
        #expect(text.contains("status 1"), "\(text)")
        // The prompt's text, escaped: not one of its control characters reached the terminal.
        #expect(text.contains("Its words: \u{201C}\\x1b[2J\\x1b[H\\x1b]0;title\\x07\\rGranted /etc (read-write)\\n\\x1b[8m\u{201D}"), "\(text)")
        #expect(!text.contains(hostile))
        // Between the command's last byte and the question's first line, the terminal is put back.
        let end = try #require(text.range(of: "open-title "), "\(text)")
        let first = try #require(text.range(of: "asks for a folder"), "\(text)")
        let between = String(text[end.upperBound..<first.lowerBound])
        let closesStrings = between.hasPrefix("\u{18}")  // CAN ends the open OSC before anything else
        #expect(closesStrings, "the open OSC string would swallow the question: \(between.debugDescription)")
        for (sequence, what) in [("\u{1B}[0m", "attributes (concealed, black on black)"), ("\u{1B}]110", "the default foreground"),
                                 ("\u{1B}]111", "the default background"), ("\u{1B}[r", "the scroll region"),
                                 ("\u{1B}[?25h", "the hidden cursor"), ("\u{1B}[?2004l", "bracketed paste"),
                                 ("\r\n", "a fresh line after the half line"), ("\u{1B}[J", "what is below erased")] {
            #expect(between.contains(sequence), "\(what) not reset: \(between.debugDescription)")
        }
        #expect(text.contains("half line "), "what the command wrote before is shown")
    }

    /// The command turns on what changes the keys a terminal sends
    /// (modifyOtherKeys 2, kitty keyboard flags, cursor-key and keypad
    /// modes, mouse reports, bracketed paste), then asks twice. The
    /// question turns them off before its first line, so the person's Ctrl-C
    /// (as their emulator would send it: `EmulatedKeyboard`) cancels and
    /// Enter answers; after each question the command gets its modes back
    /// before its next output is shown.
    @Test func keysArriveAsTypedWhateverModesTheCommandSet() throws {
        let terminal = try PersonAtTerminal()
        let modes = "\u{1B}[>4;2m\u{1B}[>9u\u{1B}[?1h\u{1B}=\u{1B}[?1000;1006h\u{1B}[?2004h"
        let script = """
            printf '%s' "$MODES"; echo modes-set
            read -r go
            "$SANDBOXED_RUN" open-panel; echo "first $?"
            p=$("$SANDBOXED_RUN" open-panel); echo "second $? $p"
            """
        let process = try start(terminal, script, options: ["--setenv", "MODES=" + modes])
        #expect(terminal.waitFor("modes-set"), "\(terminal.output)")
        #expect(EmulatedKeyboard(terminal.bytes).ctrlC == "\u{1B}[99;5u", "the command's modes changed what Ctrl-C sends")
        terminal.type("go\r")  // the modes reached the terminal before the question
        #expect(terminal.waitFor(Self.question), "\(terminal.output)")
        let asked = EmulatedKeyboard(terminal.bytes)
        #expect(asked.ctrlC == "\u{03}" && asked.enter == "\r", "kitty \(asked.kitty), modifyOtherKeys \(asked.otherKeys)")
        terminal.type(asked.ctrlC)
        #expect(terminal.waitFor("first 1", seconds: 10), "Ctrl-C did not cancel: \(terminal.output.debugDescription)")
        // As the terminal stood when the command went on (the second question may be up already).
        let shownNow = terminal.output
        let goneOn = try #require(shownNow.range(of: "first 1"))
        let back = EmulatedKeyboard(Array(shownNow[..<goneOn.lowerBound].utf8))
        #expect(back.kitty.last == 9 && back.otherKeys == 2, "the command's keyboard modes were given back: \(back)")

        #expect(terminal.waitFor(Self.question, times: 2), "\(terminal.output)")
        terminal.type(EmulatedKeyboard(terminal.bytes).enter)
        #expect(terminal.finish(process) == 0, "\(terminal.output.debugDescription)")
        let shown = terminal.output
        #expect(shown.contains("second 0 /run/sandboxed-run/grants/1"), "Enter did not answer: \(shown.debugDescription)")

        // What was written: each mode off between the command's output and the question ...
        let set = try #require(shown.range(of: "modes-set"), "\(shown)")
        let first = try #require(shown.range(of: "asks for a folder"), "\(shown)")
        let before = String(shown[set.upperBound..<first.lowerBound])
        for (sequence, what) in [("\u{1B}[>4;0m", "modifyOtherKeys"), ("\u{1B}[>0u", "kitty flags pushed"), ("\u{1B}[?1l", "cursor keys"),
                                 ("\u{1B}>", "keypad"), ("\u{1B}[?1000l", "mouse reports"), ("\u{1B}[?1006l", "SGR mouse"),
                                 ("\u{1B}[?2004l", "bracketed paste")] {
            #expect(before.contains(sequence), "\(what) not turned off: \(before.debugDescription)")
        }
        // ... and given back after it, before the command's next output.
        let cancelled = try #require(shown.range(of: "Cancelled: nothing granted."), "\(shown)")
        let next = try #require(shown.range(of: "first 1"), "\(shown)")
        let after = String(shown[cancelled.upperBound..<next.lowerBound])
        for (sequence, what) in [("\u{1B}[<u", "kitty flags popped"), ("\u{1B}[>4;2m", "modifyOtherKeys"),
                                 ("\u{1B}[?1;1000;1006;2004h", "cursor keys, mouse, paste"), ("\u{1B}=", "keypad")] {
            #expect(after.contains(sequence), "\(what) not given back: \(after.debugDescription)")
        }
    }

    /// The command times its question to appear while the person types (to
    /// the command): what they type before the question asks for the answer
    /// (`settle`, half a second) is neither echoed nor taken.
    @Test func keysTypedAsTheQuestionAppearsAreNotTaken() throws {
        let terminal = try PersonAtTerminal()
        let process = try start(terminal, "\"$SANDBOXED_RUN\" open-panel; echo \"status $?\"")
        #expect(terminal.waitFor("asks for a folder", seconds: 20), "\(terminal.output)")
        let early = !terminal.output.contains(Self.question)
        terminal.type(" \r")
        #expect(early, "the keys were typed only after the question asked (the machine was too slow for this test)")
        #expect(terminal.waitFor(Self.question), "\(terminal.output)")
        Thread.sleep(forTimeInterval: 0.5)
        terminal.type("q")
        #expect(terminal.finish(process) == 0, "\(terminal.output)")
        #expect(terminal.output.contains("status 1"), "\(terminal.output)")
        #expect(!grants.contains(folder))
    }

    /// The command ends while the question is up: the question is put away,
    /// the person told, and the terminal is left in the modes it had before
    /// the launch (not raw, not the question's).
    @Test func theCommandEndingWhileAskedRestoresTheTerminal() throws {
        let terminal = try PersonAtTerminal()
        var modes = termios()
        #expect(tcgetattr(terminal.terminal, &modes) == 0)
        let before = modes
        let process = try start(terminal, "printf '\\033[?1000h'; echo mouse-on; read -r go; (\"$SANDBOXED_RUN\" open-panel &); sleep 2; echo bye")
        #expect(terminal.waitFor("mouse-on"), "\(terminal.output)")
        terminal.type("go\n")
        #expect(terminal.waitFor(Self.question), "\(terminal.output)")
        #expect(terminal.finish(process) == 0, "\(terminal.output)")
        #expect(terminal.output.contains("The sandbox ended: nothing granted."), "\(terminal.output)")
        // Only what the question pushed is undone: the ended command's mouse reports stay off.
        let ended = try #require(terminal.output.range(of: "The sandbox ended: nothing granted."))
        let rest = String(terminal.output[ended.upperBound...])
        #expect(rest.contains("\u{1B}[<u") && !rest.contains("\u{1B}[?1000h"), "\(rest.debugDescription)")
        var after = termios()
        #expect(tcgetattr(terminal.terminal, &after) == 0)
        #expect(withUnsafeBytes(of: before) { a in withUnsafeBytes(of: after) { b in a.elementsEqual(b) } }, "the terminal's modes changed")
        #expect(!grants.contains(folder))
    }

    /// In the host view nothing can be attached: the open panel says so at
    /// once, nothing is asked, and the terminal stays the command's.
    @Test func inTheHostViewNothingIsAsked() throws {
        let terminal = try PersonAtTerminal()
        let process = try start(terminal, "\"$SANDBOXED_RUN\" open-panel; echo \"status $?\"; read -r line; echo \"read [$line]\"",
                                options: ["--view", "host"])
        #expect(terminal.waitFor("status 3"), "\(terminal.output)")
        terminal.type("keys\n")
        #expect(terminal.finish(process) == 0, "\(terminal.output)")
        #expect(terminal.output.contains("read [keys]"), "\(terminal.output)")
        #expect(!terminal.output.contains(Self.question))
    }

    /// A unix-socket connect in the sandbox's /tmp: the supervisor decides
    /// it (seccomp user notification), so it returns only while the launcher serves.
    static let connect = """
        import os, socket
        l = socket.socket(socket.AF_UNIX); l.bind("/tmp/s.sock"); l.listen()
        c = socket.socket(socket.AF_UNIX); c.connect("/tmp/s.sock")
        open(os.environ["SANDBOX_CONTAINER"] + "/connected", "w").close()
        """

    /// While the person thinks, the launcher serves the sandbox: a
    /// revocation of a folder attached earlier cuts it at once, not once
    /// the question is answered, and the supervisor answers the command's
    /// other processes.
    @Test func theSandboxIsServedWhileTheQuestionIsUp() throws {
        let terminal = try PersonAtTerminal()
        let script = """
            a=$("$SANDBOXED_RUN" open-panel) || exit 9
            (while [ -e "$a/note.txt" ]; do sleep 0.05; done; : > "$SANDBOX_CONTAINER/cut") &
            (sleep 0.5; python3 -c "$CONNECT") &
            "$SANDBOXED_RUN" open-panel; echo "second $?"
            wait
            """
        let process = try start(terminal, script, options: ["--setenv", "CONNECT=" + Self.connect])
        #expect(terminal.waitFor(Self.question), "\(terminal.output)")
        terminal.type(" ")
        #expect(terminal.waitFor(Self.question, times: 2), "\(terminal.output)")
        #expect(Self.waitForFile(in: home.path + "/data", named: "connected", seconds: 10), "the supervisor waited for the person")
        let revoked = try CLI.run(["grants", "revoke", "--folder", folder], home: home)
        #expect(revoked.status == 0, "\(revoked)")
        let cut = LiveGrantsTerminalTests.waitForFile(in: home.path + "/data", named: "cut", seconds: 10)
        #expect(cut, "the revocation waited for the person")
        #expect(terminal.output.contains(Self.question) && !terminal.output.contains("second"), "the question is still up")
        terminal.type("q")
        #expect(terminal.finish(process) == 0, "\(terminal.output)")
        #expect(terminal.output.contains("second 1"), "\(terminal.output)")
    }

    /// The same for a picker program (`--picker`): it is waited for in the
    /// launcher's loop, not in a call that stops it.
    @Test func theSandboxIsServedWhileAPickerProgramIsUp() throws {
        let picker = home.path + "/picker"
        let flag = home.path + "/release"
        let count = home.path + "/asked"
        // The first call answers at once; the second waits until the test releases it, then cancels.
        let program = """
            #!/bin/sh
            echo x >> '\(count)'
            if [ "$(wc -l < '\(count)')" -eq 1 ]; then printf '%s\\n' '\(folder)'; exit 0; fi
            i=0; while [ ! -e '\(flag)' ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
            exit 1
            """
        _ = FileManager.default.createFile(atPath: picker, contents: Data(program.utf8), attributes: [.posixPermissions: 0o755])
        let script = """
            a=$("$SANDBOXED_RUN" open-panel) || exit 9
            (while [ -e "$a/note.txt" ]; do sleep 0.05; done; : > "$SANDBOX_CONTAINER/cut") &
            (sleep 0.5; python3 -c "$CONNECT") &
            "$SANDBOXED_RUN" open-panel; echo "second $?"
            wait
            """
        let (process, out, _) = try CLI.start(["run", "--app", Self.app, "--picker", picker, "--setenv", "CONNECT=" + Self.connect,
                                                "--", "/bin/sh", "-c", script], home: home)
        var waited = 0
        while ((try? String(contentsOfFile: count, encoding: .utf8)) ?? "").split(separator: "\n").count < 2 && waited < 400 {
            usleep(50_000)
            waited += 1
        }
        let revoked = try CLI.run(["grants", "revoke", "--folder", folder], home: home)
        #expect(revoked.status == 0, "\(revoked)")
        let cut = LiveGrantsTerminalTests.waitForFile(in: home.path + "/data", named: "cut", seconds: 10)
        #expect(cut, "the revocation waited for the picker")
        #expect(Self.waitForFile(in: home.path + "/data", named: "connected", seconds: 10), "the supervisor waited for the picker")
        _ = FileManager.default.createFile(atPath: flag, contents: Data())
        let stdout = try String(decoding: out.fileHandleForReading.readAll(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0 && stdout == "second 1\n", "\(stdout)")
    }

    /// A terminal's reply that comes while the question takes keys (the
    /// command asked for the clipboard, OSC 52, before it asked for a folder,
    /// and the terminal asked the person first) is not read as keys: its
    /// `c` and `y` would grant the whole folder listed, read-write; a kitty
    /// APC answer's and an X10 click's space would choose the highlighted folder.
    @Test func aTerminalsLateReplyIsNotTakenForKeys() throws {
        let terminal = try PersonAtTerminal()
        let process = try start(terminal, "\"$SANDBOXED_RUN\" open-panel; echo \"status $?\"")
        #expect(terminal.waitFor(Self.question), "\(terminal.output)")
        terminal.type("\u{1B}]52;c;cyE=\u{1B}\\")
        terminal.type("\u{1B}_Gi=1;ENOENT:No such file or directory\u{1B}\\")
        terminal.type("\u{1B}[M  !")
        terminal.type("\u{1B}[<0;20;8M\u{1B}[<0;20;8m")
        Thread.sleep(forTimeInterval: 1)
        terminal.type("q")
        #expect(terminal.finish(process) == 0, "\(terminal.output)")
        let shown = terminal.output
        #expect(shown.contains("status 1"), "\(shown)")
        #expect(!shown.contains("whole folder") && !shown.contains("Granted"), "\(shown)")
        #expect(!grants.contains(desk))
    }

    /// The command switches the terminal to ISO 8859-1 (`ESC % @`), where
    /// UTF-8 bytes are C1 controls, and asks with words holding `Û` (C3 9B:
    /// 9B is CSI) and `?1000h` (mouse reports on). The question puts the
    /// terminal back into UTF-8 first, and shows the app's words in ASCII:
    /// not one byte 0x80–0x9F comes from them.
    @Test func theTerminalIsPutBackIntoUTF8AndTheAppsWordsAreASCII() throws {
        let terminal = try PersonAtTerminal()
        let process = try start(terminal, "printf '\\033%%@'; \"$SANDBOXED_RUN\" open-panel --prompt \"$P\"; echo \"status $?\"",
                                options: ["--setenv", "P=Vault\u{DB}?1000h"])
        #expect(terminal.waitFor(Self.question), "\(terminal.output)")
        terminal.type("q")
        #expect(terminal.finish(process) == 0, "\(terminal.output)")
        let shown = terminal.bytes
        let text = String(decoding: shown, as: UTF8.self)
        let switched = try #require(text.range(of: "\u{1B}%@"), "\(text)")
        let first = try #require(text.range(of: "asks for a folder"), "\(text)")
        #expect(text[switched.upperBound..<first.lowerBound].contains("\u{1B}%G"), "not put back into UTF-8: \(text.debugDescription)")
        #expect(text.contains("Its words: \u{201C}Vault\\u{db}?1000h\u{201D}"), "\(text)")
        #expect(!shown.indices.dropLast().contains { shown[$0] == 0xC3 && shown[$0 + 1] == 0x9B }, "the app's Û reached the terminal")
    }

    /// The lines of a frame as a terminal `width` columns wide would show
    /// them: escape sequences left out, each scalar outside ASCII as two columns.
    static func screenLines(_ text: String) -> [String] {
        var plain = text
        for pattern in ["\u{1B}\\[[0-9;?<>=]*[A-Za-z]", "\u{1B}#5", "\u{1B}[()][A-Z0-9]"] {
            plain = plain.replacingOccurrences(of: pattern, with: "", options: .regularExpression)
        }
        // Each line of the launcher's starts with CR (a frame drawn again starts on the first line of the last).
        return plain.components(separatedBy: CharacterSet(charactersIn: "\r\n"))
    }

    static func columns(_ line: String) -> Int { line.unicodeScalars.reduce(0) { $0 + ($1.isASCII ? 1 : 2) } }

    /// The app's words are a line of their own: padded with spaces to wrap,
    /// after closing the launcher's quote, they would put "Recommended by
    /// sandboxed-run: …" on a line of its own, under the launcher's label.
    /// So they are cut to one line with an ellipsis, and a quote in them escaped.
    @Test func theAppsWordsStayOnTheirOwnLine() throws {
        let terminal = try PersonAtTerminal()
        var size = winsize(ws_row: 40, ws_col: 100, ws_xpixel: 0, ws_ypixel: 0)
        _ = ioctl(terminal.terminal, UInt(TIOCSWINSZ), &size)
        let prompt = "Pick a folder\u{201D}" + String(repeating: " ", count: 58) + "Recommended by sandboxed-run: the highlighted folder is read-only"
        let process = try start(terminal, "\"$SANDBOXED_RUN\" open-panel --prompt \"$P\"; echo \"status $?\"", options: ["--setenv", "P=" + prompt])
        #expect(terminal.waitFor(Self.question), "\(terminal.output)")
        terminal.type("q")
        #expect(terminal.finish(process) == 0, "\(terminal.output)")
        let lines = Self.screenLines(terminal.output)
        let recommended = lines.filter { $0.contains("Recommended") }
        #expect(!recommended.isEmpty && recommended.allSatisfy { $0.contains("Its words: \u{201C}Pick a folder\\u{201d} Recommended") },
                "\(recommended)")
        #expect(recommended.allSatisfy { Self.columns($0) <= 100 }, "\(recommended)")
    }

    /// A name of forty Hangul leading jamo (one grapheme, eighty columns
    /// on a terminal): the footer that shows the chosen path whole wraps it,
    /// and no line is wider than the terminal (wrapping is off: the rest would be cut).
    @Test func aWideNameIsShownWhole() throws {
        let terminal = try PersonAtTerminal()
        var size = winsize(ws_row: 40, ws_col: 120, ws_xpixel: 0, ws_ypixel: 0)
        _ = ioctl(terminal.terminal, UInt(TIOCSWINSZ), &size)
        let name = "Vault" + String(repeating: "\u{1100}", count: 40) + "-and-what-is-hidden-at-the-end"
        try FileManager.default.createDirectory(atPath: desk + "/" + name, withIntermediateDirectories: true)
        let process = try start(terminal, "\"$SANDBOXED_RUN\" open-panel; echo \"status $?\"")
        #expect(terminal.waitFor(Self.question), "\(terminal.output)")
        terminal.type("j")
        #expect(terminal.waitFor(Self.question, times: 2), "\(terminal.output)")
        terminal.type("q")
        #expect(terminal.finish(process) == 0, "\(terminal.output)")
        let lines = Self.screenLines(terminal.output)
        // The footer's lines, without the launcher's mark (16 columns), make the whole path.
        #expect(lines.map { String($0.dropFirst(16)) }.joined().contains("choose " + desk + "/" + name + "c: choose all"), "\(lines)")
        #expect(lines.allSatisfy { Self.columns($0) <= 120 }, "\(lines.filter { Self.columns($0) > 120 })")
    }

    /// A folder of tens of thousands of folders (an app can make one where
    /// the browser starts, with long names): the question appears at once,
    /// says the list was cut and how to narrow it, keys do not read the
    /// folder again, the launcher's memory stays small, and a launch-time
    /// grant revoked while the person moves through it is cut at once
    /// (`grants revoke` waits its usual three seconds for that).
    @Test func aHugeFolderDoesNotHoldUpTheLauncher() throws {
        let huge = home.path + "/Huge"
        try FileManager.default.createDirectory(atPath: huge, withIntermediateDirectories: true)
        for index in 0..<40_000 { #expect(mkdir(huge + "/" + String(format: "%08d", index) + String(repeating: "x", count: 192), 0o755) == 0) }
        defer { _ = try? CLI.program("/bin/rm", ["-rf", huge]) }
        let bookmark = home.path + "/picked.bookmark"
        #expect(try CLI.run(["pick", "--app", Self.app, "--select", folder, "-o", bookmark], home: home).status == 0)
        let terminal = try PersonAtTerminal()
        let script = """
            (while [ -e "$SANDBOX_GRANT_P/note.txt" ]; do sleep 0.05; done; : > "$SANDBOX_CONTAINER/cut") &
            "$SANDBOXED_RUN" open-panel; echo "second $?"
            wait
            """
        let started = Date()
        let process = try terminal.start(["run", "--app", Self.app, "--grant", "P=" + bookmark, "--", "/bin/sh", "-c", script],
                                         home: home, in: huge)
        #expect(terminal.waitFor(Self.question, seconds: 60), "\(terminal.output)")
        let appeared = Date().timeIntervalSince(started)
        #expect(appeared < 5, "the question took \(appeared) s")
        #expect(terminal.output.contains("Not all folders here are listed"), "\(terminal.output.suffix(3000))")
        // Sixty keys at once, then the revocation while they are drawn.
        terminal.type(String(repeating: "j", count: 60))
        let revoked = try CLI.run(["grants", "revoke", "--folder", folder], home: home)
        #expect(revoked.status == 0, "\(revoked)")
        #expect(Self.waitForFile(in: home.path + "/data", named: "cut", seconds: 3), "the revocation waited for the frames")
        let status = (try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8)) ?? ""
        let peak = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
        #expect(peak > 0 && peak < 40_000, "the launcher's peak memory: \(peak) kB")
        terminal.type("q")
        #expect(terminal.finish(process) == 0, "\(terminal.output.suffix(3000))")
        #expect(terminal.output.contains("second 1"), "\(terminal.output.suffix(3000))")
    }

    /// Whether a file `name` appears anywhere under `root` within `seconds`.
    static func waitForFile(in root: String, named name: String, seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        repeat {
            if let found = FileManager.default.enumerator(atPath: root)?.contains(where: { ($0 as? String)?.hasSuffix("/" + name) == true }),
               found { return true }
            Thread.sleep(forTimeInterval: 0.05)
        } while Date() < deadline
        return false
    }
}
