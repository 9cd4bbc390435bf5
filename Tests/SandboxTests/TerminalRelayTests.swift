import Foundation
import Testing
@testable import Sandbox
import CSyscalls

/// A pty standing in for the user's terminal: the test holds the master, as
/// a terminal emulator would, and a thread reads everything shown on it.
final class UserTerminal: @unchecked Sendable {
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
    private var paused: Bool {
        get { screen.paused }
        set { screen.paused = newValue }
    }

    init() throws {
        var master: Int32 = -1
        var terminal: Int32 = -1
        try #require(csb_open_pty(&master, &terminal) == 0)
        self.master = master
        self.terminal = terminal
        Thread { [screen, master] in
            var buffer = [UInt8](repeating: 0, count: 65536)
            while !screen.lock.withLock({ screen.stopping }) {
                if screen.lock.withLock({ screen.paused }) {
                    Thread.sleep(forTimeInterval: 0.02)
                    continue
                }
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

    /// A terminal that stops reading, as one does when the user presses
    /// Ctrl-S or the emulator hangs.
    func pause() { lock.withLock { paused = true } }
    func resume() { lock.withLock { paused = false } }

    var output: String { lock.withLock { String(decoding: shown, as: UTF8.self) } }

    func waitFor(_ text: String, seconds: Double = 10) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if output.contains(text) { return true }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return output.contains(text)
    }

    func type(_ text: String) {
        _ = text.utf8CString.withUnsafeBufferPointer { write(master, $0.baseAddress, $0.count - 1) }
    }

    var modes: termios {
        var modes = termios()
        _ = tcgetattr(terminal, &modes)
        return modes
    }

    /// TIOCGETD or TIOCSWINSZ, through Python: the ioctls Swift cannot call.
    func python(_ code: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Run.python)
        process.arguments = ["-c", "import fcntl, struct, termios\n" + code]
        process.standardInput = FileHandle(fileDescriptor: terminal, closeOnDealloc: false)
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        process.waitUntilExit()
        return try String(decoding: out.fileHandleForReading.readAll(), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    var lineDiscipline: String {
        (try? python("print(struct.unpack('i', fcntl.ioctl(0, termios.TIOCGETD, bytes(4)))[0])")) ?? "?"
    }

    func resize(rows: Int, columns: Int) throws {
        _ = try python("fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack('HHHH', \(rows), \(columns), 0, 0))")
    }

    /// The command with this terminal as stdin, stdout and stderr.
    func launch(_ command: [String], _ scratch: Scratch, terminal choice: TerminalChoice = .automatic) throws -> ConfinedProcess {
        var request = LaunchRequest(
            app: try AppID("com.example.terminal"), policy: .defaultPolicy, command: command,
            containerBase: scratch.containers, protectedFolders: [scratch.containers], hostEnvironment: ["TERM": "xterm"])
        request.standardInput = terminal
        request.standardOutput = terminal
        request.standardError = terminal
        request.terminal = choice
        request.view = Views.current
        return try ConfinementPlan(request).launch()
    }
}

func sameModes(_ a: termios, _ b: termios) -> Bool {
    withUnsafeBytes(of: a) { a in withUnsafeBytes(of: b) { b in a.elementsEqual(b) } }
}

/// Waits for `process` on another thread, so the test can play the user.
func waitInBackground(_ process: ConfinedProcess) -> () -> Termination? {
    let done = DispatchSemaphore(value: 0)
    nonisolated(unsafe) var result: Termination?
    Thread {
        result = try? process.wait()
        done.signal()
    }.start()
    return {
        done.wait()
        return result
    }
}

@Suite(.inBothViews) struct TerminalRelayTests {
    /// Turns off echo and canonical mode, pushes a key and sets the N_NULL
    /// line discipline (last: it swallows output), all on fd 0.
    static let attack = Attack.prelude + """
        import fcntl, struct, termios
        def no_echo():
            modes = termios.tcgetattr(0)
            modes[3] &= ~(termios.ECHO | termios.ICANON)
            termios.tcsetattr(0, termios.TCSANOW, modes)
        attempt("TCSETS", no_echo)
        print("echo", "on" if termios.tcgetattr(0)[3] & termios.ECHO else "off")
        attempt("TIOCSTI", lambda: fcntl.ioctl(0, termios.TIOCSTI, b"x"))
        print("done", flush=True)
        try:
            fcntl.ioctl(0, termios.TIOCSETD, struct.pack("i", 27))
        except OSError:
            pass
        os._exit(0)
        """

    @Test func theCommandCannotChangeTheUsersTerminal() throws {
        let user = try UserTerminal()
        let modes = user.modes
        let discipline = user.lineDiscipline
        #expect(discipline == "0")
        let termination = try user.launch([Run.python, "-c", Self.attack], Scratch()).wait()
        #expect(termination == .exited(0))
        #expect(user.waitFor("done"))
        // TCSETS worked, on the command's own pty; TIOCSETD may be refused by
        // the seccomp filter or work on that pty: either way not on ours.
        #expect(user.output.contains("TCSETS ok"))
        #expect(user.output.contains("echo off"))
        #expect(user.output.contains("TIOCSTI EPERM"))
        #expect(sameModes(user.modes, modes), "the user's terminal settings changed")
        #expect(user.lineDiscipline == discipline)
        #expect(csb_bytes_readable(user.terminal) == 0, "input was pushed into the user's terminal")
    }

    @Test func withoutTheRelayTheCommandChangesTheUsersTerminal() throws {
        // What the relay prevents: the same attack on the terminal itself.
        let user = try UserTerminal()
        let modes = user.modes
        #expect(modes.c_lflag & tcflag_t(ECHO) != 0)
        let termination = try user.launch([Run.python, "-c", Self.attack], Scratch(), terminal: .never).wait()
        #expect(termination == .exited(0))
        #expect(user.waitFor("done"))
        #expect(user.output.contains("TCSETS ok"))
        #expect(user.modes.c_lflag & tcflag_t(ECHO) == 0, "echo stayed off after the command")
        #expect(!sameModes(user.modes, modes))
    }

    @Test func anInteractiveProgramWorksThroughTheRelay() throws {
        let user = try UserTerminal()
        let modes = user.modes
        // By device and number, not by name: the private view's devpts is an
        // instance of its own, whose /dev/pts/0 may share the user's pty's name.
        var outerStat = stat()
        #expect(fstat(user.terminal, &outerStat) == 0)
        let outer = "\(outerStat.st_dev):\(outerStat.st_rdev)"
        let code = """
            import os
            inner = os.fstat(0)
            print("own pty", f"{inner.st_dev}:{inner.st_rdev}" != os.environ["OUTER"], os.isatty(1), os.isatty(2))
            print("job control", os.getsid(0) == os.getpid(), os.tcgetpgrp(0) == os.getpgrp())
            name = input("name? ")
            print("hello", name)
            """
        let process = try user.launch(["/usr/bin/env", "OUTER=\(outer)", Run.python, "-c", code], Scratch())
        let finished = waitInBackground(process)
        #expect(user.waitFor("name? "))
        // While the command runs, the user's terminal is raw: keys go to the command's pty.
        #expect(user.modes.c_lflag & tcflag_t(ICANON | ECHO) == 0)
        user.type("world\r")
        #expect(finished() == .exited(0))
        #expect(user.waitFor("hello world"))
        #expect(user.output.contains("own pty True True True"))
        #expect(user.output.contains("job control True True"))
        #expect(user.output.contains("world\r\n"), "the command's pty echoes what was typed")
        #expect(sameModes(user.modes, modes), "the terminal was not restored")
    }

    @Test func everyByteIsShownBeforeWaitReturns() throws {
        let user = try UserTerminal()
        let code = "import sys\nsys.stdout.write(''.join('line %06d\\n' % i for i in range(100000)))"
        #expect(try user.launch([Run.python, "-c", code], Scratch()).wait() == .exited(0))
        #expect(user.waitFor("line 099999\r\n"))
        #expect(user.output.components(separatedBy: "line ").count - 1 == 100000)
    }

    @Test func aTerminalThatStopsReadingDoesNotStopTheSupervisor() throws {
        // The command floods its terminal from one thread and changes file
        // modes (served by the supervisor, in the same poll loop as the
        // relay) from another, while the user's terminal reads nothing.
        let user = try UserTerminal()
        user.pause()
        let code = """
            import os, threading, time
            def flood():
                block = b"x" * 65536
                for _ in range(64):
                    os.write(1, block)
            threading.Thread(target=flood, daemon=True).start()
            time.sleep(0.5)
            open("Documents/f", "w").close()
            results = []
            for mode in (0o600, 0o640, 0o644):
                try:
                    os.chmod("Documents/f", mode)
                    results.append("ok")
                except OSError as e:
                    results.append(e.strerror)
            open("Documents/result", "w").write(" ".join(results))
            os._exit(0)
            """
        let scratch = Scratch()
        let finished = waitInBackground(try user.launch([Run.python, "-c", code], scratch))
        let result = try AppContainer.current(for: AppID("com.example.terminal"), base: scratch.containers).documents + "/result"
        var served: String?
        for _ in 0..<200 where served == nil {
            served = try? String(contentsOfFile: result, encoding: .utf8)
            if served == nil { Thread.sleep(forTimeInterval: 0.05) }
        }
        #expect(served == "ok ok ok", "the supervisor was not served while the terminal was full")
        user.resume()
        #expect(finished() == .exited(0))
    }

    @Test func aTerminalThatCannotBeReopenedIsLeftAsItWas() throws {
        // A pty master is a terminal that cannot be opened again (that would
        // make a new pty), so the relay sets O_NONBLOCK on the description it
        // shares with others, and must put it back.
        var master: Int32 = -1
        var terminal: Int32 = -1
        try #require(csb_open_pty(&master, &terminal) == 0)
        defer { close(master); close(terminal) }
        let flags = fcntl(master, F_GETFL)
        let null = open("/dev/null", O_RDWR | O_CLOEXEC)
        defer { close(null) }
        let scratch = Scratch()
        var request = LaunchRequest(
            app: try AppID("com.example.terminal"), policy: .defaultPolicy, command: ["/bin/echo", "hello"],
            containerBase: scratch.containers, protectedFolders: [scratch.containers], hostEnvironment: [:])
        request.standardInput = null
        request.standardOutput = master
        request.standardError = null
        #expect(try ConfinementPlan(request).launch().wait() == .exited(0))
        #expect(fcntl(master, F_GETFL) == flags)
        var line = [UInt8](repeating: 0, count: 64)
        var fd = pollfd(fd: terminal, events: Int16(POLLIN), revents: 0)
        #expect(poll(&fd, 1, 5000) == 1)
        let count = read(terminal, &line, line.count)
        #expect(String(decoding: line[..<max(count, 0)], as: UTF8.self).hasPrefix("hello"))
    }

    @Test func theWindowSizeFollowsTheUsersTerminal() throws {
        let user = try UserTerminal()
        try user.resize(rows: 33, columns: 101)
        let code = """
            import os, signal
            changed = []
            signal.signal(signal.SIGWINCH, lambda *_: changed.append(1))
            size = os.get_terminal_size(0)
            print("size %dx%d" % (size.columns, size.lines), flush=True)
            while not changed:
                signal.pause()
            size = os.get_terminal_size(0)
            print("resized %dx%d" % (size.columns, size.lines), flush=True)
            """
        let process = try user.launch([Run.python, "-c", code], Scratch())
        let finished = waitInBackground(process)
        #expect(user.waitFor("size 101x33"))
        try user.resize(rows: 40, columns: 120)
        kill(getpid(), SIGWINCH)  // what the kernel sends the foreground of a resized terminal
        #expect(finished() == .exited(0))
        #expect(user.waitFor("resized 120x40"))
    }

    @Test func aLaunchFailureLeavesTheTerminalAlone() throws {
        let user = try UserTerminal()
        let modes = user.modes
        let scratch = Scratch()
        let tool = scratch.path + "/tool"
        try FileManager.default.copyItem(atPath: "/bin/true", toPath: tool)
        // Not in the private view (found on the host: 126, and why); refused by Landlock in the host view.
        let refusal = SandboxError.cannotExecute(command: tool, errno: Views.current == .private ? .noSuchFileOrDirectory : .permissionDenied)
        #expect(throws: refusal) {
            try user.launch([tool], scratch)
        }
        #expect(sameModes(user.modes, modes))
    }

    @Test func theLauncherRestoresTheTerminalWhenSignalled() throws {
        // The CLI on a pty, as a user runs it; SIGTERM to the launcher reaches
        // the command through the keeper, and the terminal comes back cooked.
        let scratch = Scratch()
        let driver = """
            import os, pty, signal, sys, termios, time
            pid, fd = pty.fork()
            if pid == 0:
                os.execv(sys.argv[1], sys.argv[1:])
            shown = b""
            while b"started" not in shown:
                shown += os.read(fd, 1024)
            raw = not termios.tcgetattr(fd)[3] & termios.ICANON
            os.kill(pid, signal.SIGTERM)
            while True:
                try:
                    if not os.read(fd, 1024): break
                except OSError:
                    break
            _, status = os.waitpid(pid, 0)
            lflag = termios.tcgetattr(fd)[3]
            print("raw while running", raw)
            print("cooked after", bool(lflag & termios.ICANON and lflag & termios.ECHO))
            print("status", os.waitstatus_to_exitcode(status))
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Run.python)
        process.arguments = ["-c", driver, Processes.cli, "run", "--app", "com.example.terminal", "--",
                             "/bin/sh", "-c", "echo started; exec sleep 30"]
        process.environment = ["XDG_DATA_HOME": scratch.path + "/data", "HOME": scratch.path, "PATH": "/usr/bin:/bin"]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let lines = try String(decoding: out.fileHandleForReading.readAll(), as: UTF8.self)
        process.waitUntilExit()
        #expect(lines == "raw while running True\ncooked after True\nstatus 143\n")
    }
}
