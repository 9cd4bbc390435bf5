@preconcurrency import Glibc
import CSyscalls
import SystemPackage

/// The command's own pseudo-terminal, relayed to the user's terminal, as
/// sudo does with use_pty. Given the user's terminal, a confined command
/// could change its settings and line discipline (TCSETS, TIOCSETD), which
/// outlive the command, or push input into it; given a pty of its own it
/// changes only that pty, and the launcher alone touches the user's.
///
/// The launcher holds the pty's master and, while the command runs, a copy
/// of its terminal side, so that the master never reports a hang-up in a
/// loop when the command closes its descriptors. After the command's
/// processes are all gone, that copy is closed and the master read until
/// EIO: then every byte the command wrote has been seen.
final class TerminalRelay {
    /// The command's stdin, stdout and stderr: the pty for each that was a terminal.
    let commandStandardIO: (CInt, CInt, CInt)
    /// The descriptor (0, 1 or 2) that becomes the command's controlling terminal.
    let controllingTerminal: CInt

    private let master: OwnedDescriptor
    private var terminalSide: OwnedDescriptor?
    /// The user's terminal as stdin, read while the command runs, if it is one.
    private let input: CInt?
    /// A non-blocking description of it (`csb_reopen_terminal`), when one could be made.
    private let inputCopy: OwnedDescriptor?
    /// Where the pty's output goes: stdout's terminal, else stderr's, else stdin's.
    private let output: CInt
    private let outputCopy: OwnedDescriptor?
    /// The terminal whose window size the pty follows.
    private let sizeSource: CInt

    private var toCommand = RelayBuffer(capacity: 4096)
    private var toUser = RelayBuffer(capacity: 65536)
    private var reading = false
    private var writing = true
    private var masterOpen = true
    private var savedModes: termios?
    /// The output's file status flags, when we had to set O_NONBLOCK on the
    /// description we share (no copy could be opened, say after `su`).
    private var savedOutputFlags: CInt?
    private var windowChanges: CInt = -1
    private var roles: [Role] = []
    /// A question to the person owns the terminal (`LiveGrantTerminal`):
    /// keys are not read and the command's output is held in its pty.
    private var paused = false
    /// The terminal's modes while a question owns it.
    private var questionModes: termios?
    /// What the command's output, as far as it reached the terminal, did to
    /// the modes a question turns off (and gives back).
    private var commandModes = TerminalModes()

    private enum Role { case input, master, output, window }

    /// Which of stdin, stdout and stderr are terminals, decided before the
    /// pty exists: in the private view the keeper opens it in the sandbox's
    /// own devpts, so that the command's `ttyname` can name it.
    struct Layout {
        let given: [CInt]
        let terminals: [Bool]
        /// The first terminal among them: the controlling terminal's slot, and the size to follow.
        let first: Int

        /// Nil when none of the three is a terminal.
        init?(standardInput: CInt, standardOutput: CInt, standardError: CInt) {
            given = [standardInput, standardOutput, standardError]
            terminals = given.map { isatty($0) == 1 }
            guard let first = terminals.firstIndex(of: true) else { return nil }
            self.first = first
        }

        /// The slots that get the pty: 1 stdin, 2 stdout, 4 stderr.
        var slots: CInt { terminals.indices.reduce(0) { $0 | (terminals[$1] ? 1 << CInt($1) : 0) } }

        /// The user's terminal's settings and size, which the command's pty starts with.
        var modes: termios? {
            var modes = termios()
            return tcgetattr(given[first], &modes) == 0 ? modes : nil
        }

        var window: winsize? {
            var size = winsize()
            return ioctl(given[first], UInt(TIOCGWINSZ), &size) == 0 ? size : nil
        }
    }

    /// A relay for a pty opened here, with the user's settings and size.
    convenience init(layout: Layout) throws(SandboxError) {
        var masterFD: CInt = -1
        var terminalFD: CInt = -1
        guard csb_open_pty(&masterFD, &terminalFD) == 0 else {
            throw .setup(step: "opening a pseudo-terminal for the command", errno: Errno(rawValue: errno))
        }
        let master = OwnedDescriptor(taking: masterFD)
        let terminal = OwnedDescriptor(taking: terminalFD)
        // The command starts with the user's settings (erase key, modes) and size.
        if var modes = layout.modes { _ = tcsetattr(terminalFD, TCSANOW, &modes) }
        _ = csb_copy_window_size(layout.given[layout.first], masterFD)
        try self.init(layout: layout, master: master, terminal: terminal)
    }

    /// A relay for a pty opened elsewhere (by the keeper, which set its
    /// settings and size): the command's terminal side goes in each slot
    /// that was a terminal.
    init(layout: Layout, master: OwnedDescriptor, terminal: OwnedDescriptor) throws(SandboxError) {
        self.master = master
        terminalSide = terminal
        guard fcntl(master.rawValue, F_SETFL, O_NONBLOCK) == 0 else {
            throw .setup(step: "making the pty non-blocking", errno: Errno(rawValue: errno))
        }
        let given = layout.given
        let terminals = layout.terminals
        sizeSource = given[layout.first]
        let io = given.indices.map { terminals[$0] ? terminal.rawValue : given[$0] }
        commandStandardIO = (io[0], io[1], io[2])
        controllingTerminal = CInt(layout.first)
        if terminals[0] {
            input = given[0]
            let copy = csb_reopen_terminal(given[0], O_RDONLY)
            inputCopy = copy >= 0 ? OwnedDescriptor(taking: copy) : nil
        } else {
            input = nil
            inputCopy = nil
        }
        output = terminals[1] ? given[1] : terminals[2] ? given[2] : given[0]
        let copy = csb_reopen_terminal(output, O_WRONLY)
        outputCopy = copy >= 0 ? OwnedDescriptor(taking: copy) : nil
    }

    deinit { end() }

    /// Puts the user's terminal in raw mode (keys go to the command's pty,
    /// which does the echo, line editing and signals) when we are in its
    /// foreground, and starts following window size changes.
    func begin() {
        // A terminal that stops reading must not block the loop that also
        // serves the supervisor: write without blocking, on our own
        // description if we have one, else on the shared one until `end()`.
        if outputCopy == nil, savedOutputFlags == nil {
            let flags = fcntl(output, F_GETFL)
            if flags >= 0, flags & O_NONBLOCK == 0, fcntl(output, F_SETFL, flags | O_NONBLOCK) == 0 {
                savedOutputFlags = flags
            }
        }
        if windowChanges < 0 {
            windowChanges = csb_window_watch()  // -1: the size is copied once, not followed
            _ = csb_copy_window_size(sizeSource, master.rawValue)
        }
        guard let input else { return }
        // A background job must not read the terminal or change its modes (it
        // would be stopped). A terminal that is not our controlling terminal
        // has no foreground for us: tcgetpgrp fails.
        let foreground = tcgetpgrp(input)
        guard foreground < 0 || foreground == getpgrp() else { return }
        var modes = termios()
        guard tcgetattr(input, &modes) == 0 else { return }
        var raw = modes
        cfmakeraw(&raw)
        guard tcsetattr(input, TCSANOW, &raw) == 0 else { return }
        savedModes = modes
        reading = true
    }

    /// Restores the user's terminal; safe to call more than once.
    func end() {
        reading = false
        if windowChanges >= 0 {
            csb_window_unwatch(windowChanges)
            windowChanges = -1
        }
        if let flags = savedOutputFlags {
            _ = fcntl(output, F_SETFL, flags)
            savedOutputFlags = nil
        }
        if var modes = savedModes, let input {
            _ = tcsetattr(input, TCSANOW, &modes)
            savedModes = nil
        }
    }

    /// Appends what the relay waits for to `fds`; `serve` takes the same slice back.
    func addRequests(to fds: inout [pollfd]) {
        roles.removeAll(keepingCapacity: true)
        func add(_ fd: CInt, _ events: Int32, _ role: Role) {
            fds.append(pollfd(fd: fd, events: Int16(events), revents: 0))
            roles.append(role)
        }
        if reading, !paused, toCommand.hasSpace, let input { add(inputCopy?.rawValue ?? input, POLLIN, .input) }
        let masterEvents = (masterOpen && !paused && toUser.hasSpace ? POLLIN : 0) | (masterOpen && !toCommand.isEmpty ? POLLOUT : 0)
        if masterEvents != 0 { add(master.rawValue, Int32(masterEvents), .master) }
        if writing, !paused, !toUser.isEmpty { add(outputCopy?.rawValue ?? output, POLLOUT, .output) }
        if windowChanges >= 0 { add(windowChanges, POLLIN, .window) }
    }

    /// Moves at most one buffer's worth in each direction, so that the
    /// supervisor sharing the poll loop is never starved.
    func serve(_ fds: ArraySlice<pollfd>) {
        for (role, fd) in zip(roles, fds) where fd.revents != 0 {
            switch role {
            case .input: readInput(fd.revents)
            case .master:
                if fd.revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 { readMaster() }
                if fd.revents & Int16(POLLOUT) != 0 { writeMaster() }
            case .output: writeOutput()
            case .window:
                var byte: UInt8 = 0
                while read(windowChanges, &byte, 1) == 1 {}
                // TIOCSWINSZ on the master: the kernel sends the command's foreground SIGWINCH.
                _ = csb_copy_window_size(sizeSource, master.rawValue)
            }
        }
    }

    /// After every process of the command is gone: drops pending input, then
    /// copies the rest of the command's output to the user's terminal (still
    /// raw, so that it is shown as the rest was), and restores the terminal.
    func finish() {
        defer { end() }
        paused = false
        reading = false
        toCommand.clear()
        terminalSide = nil
        while masterOpen || (writing && !toUser.isEmpty) {
            var fds: [pollfd] = []
            if masterOpen, toUser.hasSpace { fds.append(pollfd(fd: master.rawValue, events: Int16(POLLIN), revents: 0)) }
            if writing, !toUser.isEmpty { fds.append(pollfd(fd: outputCopy?.rawValue ?? output, events: Int16(POLLOUT), revents: 0)) }
            // EIO comes once the buffer is empty. Only a process that escaped
            // the keeper could keep the pty open: stop after a second of silence.
            let ready = poll(&fds, nfds_t(fds.count), masterOpen ? 1000 : -1)
            if ready < 0 { if errno == EINTR { continue } else { break } }
            if ready == 0 {
                masterOpen = false
                continue
            }
            for fd in fds where fd.revents != 0 {
                if fd.fd == master.rawValue { readMaster() } else { writeOutput() }
            }
        }
    }

    // MARK: A question to the person

    /// The person can be asked here: the relay reads their terminal (the
    /// launcher is in its foreground and set it raw) and nothing else asks.
    var canAsk: Bool { reading && savedModes != nil && !paused && input != nil }

    /// Takes the user's terminal from the command: keys are no longer read
    /// for it, its output stays in its pty until `resumeForCommand`, and the
    /// terminal is back in the user's own modes (canonical, echo), except
    /// that the interrupt key ends the line (as VEOL) instead of signalling
    /// anyone. Keys typed before are dropped: they were not typed as an answer.
    /// Echo stays off until `answerFromNow`.
    /// Returns the descriptors to read the answer from and to show the
    /// question on, and the interrupt key.
    func pauseForQuestion() -> (input: CInt, output: CInt, interrupt: UInt8)? {
        guard canAsk, let input, var modes = savedModes else { return nil }
        modes.c_lflag |= tcflag_t(ICANON | ECHOE | ECHOK)
        modes.c_lflag &= ~tcflag_t(ECHO)
        modes.c_lflag &= ~tcflag_t(ISIG)
        modes.c_iflag |= tcflag_t(ICRNL)
        modes.c_iflag &= ~tcflag_t(INLCR | IGNCR)
        modes.c_oflag |= tcflag_t(OPOST | ONLCR)
        let interrupt = withUnsafeMutableBytes(of: &modes.c_cc) { keys in
            let interrupt = keys[Int(VINTR)] != 0 ? keys[Int(VINTR)] : 0x03
            keys[Int(VINTR)] = interrupt
            keys[Int(VEOL)] = interrupt
            return interrupt
        }
        // TCSANOW and a separate flush: TCSAFLUSH would wait for a terminal
        // that stopped reading, and the loop must not.
        _ = tcflush(input, TCIFLUSH)
        guard tcsetattr(input, TCSANOW, &modes) == 0 else { return nil }
        paused = true
        questionModes = modes
        // The question starts with CAN (`LiveGrantTerminalSession.reset`).
        commandModes.cancelSequence()
        return (inputCopy?.rawValue ?? input, outputCopy?.rawValue ?? output, interrupt)
    }

    /// Drops every key typed so far, and echoes from now on: what the person types next is the answer.
    func answerFromNow() {
        guard paused, let input, var modes = questionModes else { return }
        modes.c_lflag |= tcflag_t(ECHO)
        _ = tcflush(input, TCIFLUSH)
        _ = tcsetattr(input, TCSANOW, &modes)
    }

    /// For a browser that reads keys one by one (`LiveGrantTerminalSession.browse`):
    /// drops every key typed so far; from now on each key is read as typed,
    /// without echo, and the interrupt key arrives as a byte (it signals nobody).
    func browseFromNow() {
        guard paused, let input, var modes = questionModes else { return }
        modes.c_lflag &= ~tcflag_t(ICANON | ECHO | ISIG | IEXTEN)
        modes.c_iflag &= ~tcflag_t(IXON)
        withUnsafeMutableBytes(of: &modes.c_cc) { keys in
            keys[Int(VMIN)] = 1
            keys[Int(VTIME)] = 0
        }
        _ = tcflush(input, TCIFLUSH)
        _ = tcsetattr(input, TCSANOW, &modes)
    }

    /// What gives the command back the modes a question turned off
    /// (`TerminalModes.restore`); `commandEnded`: only what the question
    /// itself changed is undone, since nothing is left to want the rest.
    func modesForCommand(commandEnded: Bool) -> String {
        commandEnded ? TerminalModes().restore : commandModes.restore
    }

    /// Gives the terminal back to the command: raw again (keys typed after
    /// the answer are dropped, as before it), and its held output flows.
    func resumeForCommand() {
        guard paused else { return }
        paused = false
        guard let input, let modes = savedModes else { return }
        var raw = modes
        cfmakeraw(&raw)
        _ = tcflush(input, TCIFLUSH)
        _ = tcsetattr(input, TCSANOW, &raw)
    }

    private func readInput(_ revents: Int16) {
        guard let input else { return }
        let count: Int
        if let inputCopy {
            count = toCommand.fill(from: inputCopy.rawValue, limit: .max)
        } else {
            // The shared description may block: read only what is there.
            let available = Int(csb_bytes_readable(input))
            if available <= 0 {
                if revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 { reading = false }
                return
            }
            count = toCommand.fill(from: input, limit: available)
        }
        if count == 0 || (count < 0 && errno != EAGAIN && errno != EINTR) {
            reading = false  // hung up: the command keeps what its pty has
            return
        }
        writeMaster()
    }

    private func readMaster() {
        // A pty hands over at most a few KiB per read: gather what is there
        // (up to the buffer) and write it in one go, to wake the terminal less.
        while toUser.hasSpace {
            let count = toUser.fill(from: master.rawValue, limit: .max)
            if count == 0 || (count < 0 && errno != EAGAIN && errno != EINTR) {
                masterOpen = false  // EIO: no terminal side is open and the buffer is empty
                break
            }
            if count < 0 { break }
        }
        if writing { writeOutput() } else { toUser.clear() }
    }

    private func writeMaster() {
        if toCommand.drain(to: master.rawValue) < 0, errno != EAGAIN, errno != EINTR {
            toCommand.clear()
        }
    }

    private func writeOutput() {
        if toUser.drain(to: outputCopy?.rawValue ?? output, seen: { commandModes.follow($0) }) < 0, errno != EAGAIN, errno != EINTR {
            writing = false  // the user's terminal is gone: discard, so the command never blocks
            toUser.clear()
        }
    }
}

/// Bytes on their way from one descriptor to another.
struct RelayBuffer {
    private var storage: [UInt8]
    private var start = 0
    private var end = 0

    init(capacity: Int) { storage = [UInt8](repeating: 0, count: capacity) }

    var isEmpty: Bool { start == end }
    var hasSpace: Bool { end < storage.count || start > 0 }

    mutating func clear() {
        start = 0
        end = 0
    }

    /// One read(2) into the free space: its result (errno set when -1).
    mutating func fill(from fd: CInt, limit: Int) -> Int {
        if start > 0 && end == storage.count {
            storage.withUnsafeMutableBytes { bytes in
                _ = memmove(bytes.baseAddress!, bytes.baseAddress! + start, end - start)
            }
            end -= start
            start = 0
        }
        let room = min(storage.count - end, limit)
        let count = storage.withUnsafeMutableBytes { bytes in read(fd, bytes.baseAddress! + end, room) }
        if count > 0 { end += count }
        return count
    }

    /// One write(2) of what is held: its result (errno set when -1).
    /// `seen` gets the bytes written, in order.
    mutating func drain(to fd: CInt, seen: (UnsafeRawBufferPointer) -> Void = { _ in }) -> Int {
        guard !isEmpty else { return 0 }
        let count = storage.withUnsafeBytes { bytes in
            let written = write(fd, bytes.baseAddress! + start, end - start)
            let saved = errno
            if written > 0 { seen(UnsafeRawBufferPointer(rebasing: bytes[start..<(start + written)])) }
            errno = saved
            return written
        }
        if count > 0 {
            start += count
            if start == end { clear() }
        }
        return count
    }
}
