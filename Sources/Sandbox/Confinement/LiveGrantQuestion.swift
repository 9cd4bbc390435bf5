@preconcurrency import Glibc
import SystemPackage

/// A question to the person that the launcher's wait loop waits on like any
/// other descriptor: while the person thinks, the supervisor answers the
/// command's other threads, revocations are applied and the terminal's size
/// is followed. The broker reads no other request until it is answered.
public protocol LiveGrantQuestion: AnyObject {
    /// Polled for POLLIN: the answer, or part of it, is there. Nil: nothing to read yet.
    var descriptor: CInt? { get }
    /// Milliseconds until `advance` should run even if nothing was read (-1: none).
    var timeout: CInt { get }
    /// Called after every wake of the loop; `ready`: `descriptor` polled
    /// ready. The reply once the question is answered.
    func advance(ready: Bool) -> LiveGrantReply?
    /// The sandbox ends unanswered: put everything back (the terminal, the picker's process).
    func abandon()
}

/// What the broker does with a request: answer now, or wait for the person.
public enum LiveGrantOutcome {
    case reply(LiveGrantReply)
    case asking(LiveGrantQuestion)
}

/// What a request can use besides its bytes.
public struct LiveGrantContext {
    /// The running sandbox's grant area; nil where nothing can be attached
    /// (the host view, or `LiveGrantSupport.broker`).
    public let area: LiveGrantArea?
    /// The person's terminal, when the launcher relays one it reads.
    public let terminal: LiveGrantTerminal?
}

/// The user's terminal, which the launcher relays to the command's own pty
/// (`TerminalRelay`), borrowed for one question at a time.
public final class LiveGrantTerminal: @unchecked Sendable {
    private let relay: TerminalRelay

    init(relay: TerminalRelay) { self.relay = relay }

    /// The person can be asked on it now.
    public var available: Bool { relay.canAsk }

    /// Takes the terminal from the command for a question (see
    /// `LiveGrantTerminalSession`); nil when it cannot be had.
    public func take() -> LiveGrantTerminalSession? {
        guard let (input, output, interrupt) = relay.pauseForQuestion() else { return nil }
        let session = LiveGrantTerminalSession(relay: relay, input: input, output: output, interrupt: interrupt)
        session.write(LiveGrantTerminalSession.reset)
        return session
    }
}

/// The person's terminal while a question owns it. The command's output is
/// held back (in its pty) and keys reach only this session; the terminal is
/// in the user's canonical mode with echo. Every line shown starts with the
/// launcher's mark, and the first is preceded by `reset`, so that nothing
/// the command printed before (a half line, an escape sequence left open,
/// invisible or recoloured text, a scroll region) hides or rewrites it.
public final class LiveGrantTerminalSession: @unchecked Sendable {
    private let relay: TerminalRelay
    /// Where the answer is read: poll it for POLLIN.
    public let input: CInt
    private let output: CInt
    private let interrupt: UInt8
    private var line: [UInt8] = []
    private var closed = false
    /// The longest answer read: a path and its newline.
    public static let maximumLine = 4097

    init(relay: TerminalRelay, input: CInt, output: CInt, interrupt: UInt8) {
        self.relay = relay
        self.interrupt = interrupt
        self.input = input
        self.output = output
    }

    /// What the terminal is put back to before the question, whatever the
    /// command's output did to it: CAN ends any escape sequence or string
    /// left open (an unterminated OSC would swallow the question), and ST
    /// the strings that CAN does not; UTF-8 (`ESC % G`: in ISO 8859-1, which
    /// `ESC % @` selects, the UTF-8 bytes of a name would be C1 controls); the default and palette colours (OSC
    /// 104, 110, 111: text drawn in the background's colour), the scroll
    /// region (saved and restored around it: setting it moves the cursor),
    /// the character set, every attribute (concealed, reversed, blinking);
    /// then the modes that change what keys, clicks and pastes send, which
    /// `close` gives back to the command (`TerminalModes.plain`): cursor-key
    /// and keypad modes, new-line mode, modifyOtherKeys and the kitty
    /// keyboard flags (Enter and Ctrl-C would send escape sequences),
    /// bracketed paste (a pasted path would be wrapped in escapes), mouse and
    /// focus reports (they would type escapes), and insert mode, wrapping and
    /// a hidden cursor. Then a fresh line, and everything below the cursor
    /// erased. The alternate screen is left as it is: the question shows on
    /// either, and leaving it would wipe the command's display.
    static let reset = "\u{18}\u{1B}\\" + "\u{1B}%G"
        + "\u{1B}]104\u{1B}\\\u{1B}]110\u{1B}\\\u{1B}]111\u{1B}\\"
        + "\u{1B}7\u{1B}[r\u{1B}8"
        + "\u{1B}(B\u{0F}\u{1B}[0m" + TerminalModes.plain
        + "\r\n\u{1B}[J"

    /// Each line of the launcher's starts so: cleared, single width, and a
    /// label in reverse video the command's text never appears on while the question is up.
    static let mark = "\r\u{1B}[2K\u{1B}#5\u{1B}[0;1;7m sandboxed-run \u{1B}[0m "
    /// The mark, for lines drawn with `draw`, and the columns it takes.
    public static var lineMark: (text: String, width: Int) { (mark, 16) }

    /// `reset`, for a question the launcher asks on the terminal itself once
    /// the command has ended (`run --review`'s).
    public static var terminalReset: String { reset }

    /// Shows `lines`, each marked as the launcher's. The caller escapes
    /// whatever came from elsewhere (`Printable`).
    public func show(_ lines: [String]) {
        write(lines.map { Self.mark + $0 + "\u{1B}[0m\r\n" }.joined())
    }

    /// Shows `label` on a marked line and leaves the cursor after it, for
    /// the answer: keys typed before are dropped and were never echoed, so
    /// that a question the command times to appear while the person types
    /// (to the command) does not take what they meant for it.
    public func ask(_ label: String) {
        relay.answerFromNow()
        write(Self.mark + label + "\u{1B}[0m")
    }

    /// From now on keys are read one by one, unechoed, for a browser
    /// (`FolderBrowser`): keys typed before are dropped, as for `ask`.
    public func browse() {
        relay.browseFromNow()
    }

    /// The interrupt key (Ctrl-C unless the person chose another): it cancels.
    public var interruptKey: UInt8 { interrupt }

    /// The terminal's size (however small), or 80×24 when it gives none.
    public var size: (width: Int, height: Int) {
        var size = winsize()
        guard ioctl(output, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0, size.ws_row > 0 else { return (80, 24) }
        return (Int(size.ws_col), Int(size.ws_row))
    }

    /// The bytes the terminal has (once `input` polled ready): nil when it
    /// hung up, empty when there was nothing after all.
    public func readBytes() -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: 256)
        var got: Int
        repeat { got = buffer.withUnsafeMutableBytes { Glibc.read(input, $0.baseAddress, $0.count) } } while got < 0 && errno == EINTR
        if got < 0 && errno == EAGAIN { return [] }
        return got > 0 ? Array(buffer[..<got]) : nil
    }

    /// Writes the launcher's own bytes (a browser's frame, already escaped).
    public func draw(_ text: String) { write(text) }

    /// How long a question is shown before it takes keys (milliseconds).
    public static let settle: CInt = 500

    public enum Answer: Equatable {
        /// Not complete yet: poll again.
        case waiting
        /// The line typed, without its newline.
        case line([UInt8])
        /// An empty line, end of file (Ctrl-D), the interrupt key (Ctrl-C), or the terminal gone.
        case cancelled
        /// Longer than `maximumLine`.
        case tooLong
    }

    /// Reads what the terminal has (once `input` polled ready).
    public func read() -> Answer {
        var buffer = [UInt8](repeating: 0, count: 4096)
        var got: Int
        repeat { got = buffer.withUnsafeMutableBytes { Glibc.read(input, $0.baseAddress, $0.count) } } while got < 0 && errno == EINTR
        if got < 0 && errno == EAGAIN { return .waiting }
        guard got > 0 else {
            write("\r\n")
            return .cancelled  // end of file at the start of a line, or the terminal hung up
        }
        line += buffer[..<got]
        if line.last == interrupt {
            write("\r\n")
            return .cancelled
        }
        // Ctrl-D in the middle of a line hands over what was typed: not an answer yet.
        guard line.last == UInt8(ascii: "\n") else { return line.count > Self.maximumLine ? .tooLong : .waiting }
        let answer = Array(line.dropLast())
        line = []
        if answer.count > Self.maximumLine - 1 { return .tooLong }
        return answer.isEmpty ? .cancelled : .line(answer)
    }

    /// Gives the terminal back to the command, with the modes its output
    /// had set (`TerminalModes.restore`); safe to call more than once.
    /// `commandEnded`: the sandbox ended while asking, so only what the
    /// question itself pushed is undone (a command killed mid-way must not
    /// leave mouse reports on for the shell).
    public func close(commandEnded: Bool = false) {
        guard !closed else { return }
        closed = true
        write(relay.modesForCommand(commandEnded: commandEnded))
        relay.resumeForCommand()
    }

    deinit { close() }

    /// Writes `text` to the terminal, waiting at most a second for a
    /// terminal that stopped reading (then the rest is dropped).
    func write(_ text: String) {
        var bytes = Array(text.utf8)
        var waited: CInt = 0
        while !bytes.isEmpty {
            let count = bytes.withUnsafeBytes { Glibc.write(output, $0.baseAddress, $0.count) }
            if count > 0 {
                bytes.removeFirst(count)
                continue
            }
            if count < 0 && errno == EINTR { continue }
            guard count < 0 && errno == EAGAIN, waited < 1000 else { return }
            var ready = pollfd(fd: output, events: Int16(POLLOUT), revents: 0)
            _ = poll(&ready, 1, 100)
            waited += 100
        }
    }
}
