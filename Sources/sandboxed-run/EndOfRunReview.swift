@preconcurrency import Glibc
import AppSandbox
import CSyscalls
import SystemPackage

/// What `run --review` says when the command has ended: the staged changes,
/// and on a terminal the person's answer (accept, reject, a diff, or keep
/// them staged); elsewhere how to review them later.
enum EndOfRunReview {
    static func run(_ reviews: [StagedReview], app: String) throws {
        var total = 0
        var lines: [String] = []
        for review in reviews {
            let changes = try review.changes()
            total += changes.count
            guard !changes.isEmpty else { continue }
            lines += ["staged in grant \(Printable.message(review.staged.name)) (\(Printable.path(bytes: review.path.bytes))), not applied:"]
                + changes.prefix(200).map { "  " + Review.line($0, in: review.path) }
                + (changes.count > 200 ? ["  ... and \(changes.count - 200) more (`sandboxed-run review list --app \(app)`)"] : [])
        }
        guard total > 0 else {
            for review in reviews { _ = try? review.reject() }
            Console.notice("--review: the command changed nothing in its staged grants")
            return
        }
        let tty = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard tty >= 0, isatty(0) != 0 || isatty(2) != 0 else {
            if tty >= 0 { close(tty) }
            Console.escapedLines(lines)
            Console.notice("\(total) change\(total == 1 ? " is" : "s are") staged: review with `sandboxed-run review list --app \(app)` "
                + "(and `review diff`, `review accept`, `review reject`)")
            return
        }
        defer { close(tty) }
        // The command had the terminal until now: its output may have left it
        // concealing or recolouring text, and it may have printed a forged
        // list. The terminal is put back first, and every line the launcher
        // shows carries its mark, as a live grant's question does.
        let mark = LiveGrantTerminalSession.lineMark.text
        write(tty, LiveGrantTerminalSession.terminalReset + lines.map { mark + $0 + "\u{1B}[0m\r\n" }.joined())
        // Signals were held for the command, which has ended: Ctrl-C now ends the question, and the changes stay staged.
        _ = csb_forward_signals_to(-1)
        for _ in 0..<5 {
            // Whatever waits unread on the terminal was typed before this
            // question was on screen, perhaps as the command told the person
            // to: it is no answer. And the answer is a word, never one key.
            write(tty, mark + "Apply these changes? Type accept, reject, diff, or keep (the default: they stay staged): \u{1B}[0m")
            // Keys count only from half a second after the question is on
            // screen, as for the live grants' questions.
            usleep(500_000)
            _ = tcflush(tty, TCIFLUSH)
            switch readAnswer(tty) {
            case "accept":
                var clean = true
                for review in reviews {
                    for outcome in try review.accept() where outcome.result != .applied {
                        clean = false
                        Console.error("not applied as staged: \(Printable.path(bytes: outcome.change.hostPath(in: review.path))): \(outcome.result)")
                    }
                }
                Console.notice(clean ? "accepted: the changes are in the folder, on disk" : "accepted, except what is named above")
                return
            case "reject":
                for review in reviews { _ = try review.reject() }
                Console.notice("rejected: the folder is as it was")
                return
            case "diff":
                for review in reviews {
                    let diff = UnifiedDiff.printable(try review.diff())
                    diff.withUnsafeBytes { _ = Glibc.write(tty, $0.baseAddress, $0.count) }
                }
            case "", "keep":
                Console.notice("kept staged: `sandboxed-run review list --app \(app)` shows them again")
                return
            default:
                write(tty, "Please type accept, reject, diff or keep.\n")
            }
        }
        Console.notice("kept staged: `sandboxed-run review list --app \(app)` shows them again")
    }

    private static func write(_ fd: CInt, _ text: String) {
        var text = text
        text.withUTF8 { _ = Glibc.write(fd, $0.baseAddress, $0.count) }
    }

    /// One line from the terminal (at most 64 bytes read), trimmed and lower-cased; "" for none.
    private static func readAnswer(_ fd: CInt) -> String {
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while line.count < 64 {
            let count = read(fd, &byte, 1)
            if count < 0, errno == EINTR { continue }
            guard count == 1, byte != UInt8(ascii: "\n"), byte != UInt8(ascii: "\r") else { break }
            line.append(byte)
        }
        guard line.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else { return "?" }
        return String(decoding: line, as: UTF8.self).trimmingSpaces().lowercased()
    }
}

extension String {
    func trimmingSpaces() -> String {
        String(self.drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}
