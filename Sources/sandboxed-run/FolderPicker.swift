@preconcurrency import Glibc
import CSyscalls
import AppSandbox
import SystemPackage

/// The folder browser (`FolderBrowser`) on /dev/tty, for `pick` and
/// `run --on-missing/--on-stale prompt`. It talks to the person through
/// /dev/tty, not stdin/stdout, so the app that asked cannot type or read
/// the answers, the confirmation of a broad grant included.
enum FolderPicker {
    /// Returns the chosen folder, opened, and its path as shown, or nil when
    /// the person cancelled. The cursor starts on `highlighted` when it is a folder in `start`.
    static func choose(
        title: [String], access: GrantAccess, startingAt start: FilePath, highlighted: FilePath.Component? = nil
    ) throws -> FolderBrowser.Chosen? {
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC)
        guard tty >= 0 else {
            throw GrantError.bookmarkFile(path: "/dev/tty", problem: "no terminal to ask on: pass --select PATH to choose without asking")
        }
        defer { close(tty) }
        var saved = termios()
        guard tcgetattr(tty, &saved) == 0 else {
            throw GrantError.bookmarkFile(path: "/dev/tty", problem: "not a terminal: pass --select PATH")
        }
        let origin: OwnedDescriptor
        do { origin = try OwnedDescriptor.openFolder(start.bytes, relativeTo: nil, follow: true) } catch {
            throw GrantError.folderNotFound("\(start)")
        }
        var raw = saved
        raw.c_lflag &= ~tcflag_t(ICANON | ECHO | ISIG)
        raw.c_cc.6 = 1  // VMIN
        raw.c_cc.5 = 0  // VTIME
        tcsetattr(tty, TCSAFLUSH, &raw)
        // A resize interrupts the read (no SA_RESTART), and the frame is drawn again for the new size.
        var resized = sigaction()
        resized.__sigaction_handler.sa_handler = { _ in }
        sigemptyset(&resized.sa_mask)
        var previous = sigaction()
        sigaction(SIGWINCH, &resized, &previous)
        var painter = FolderBrowser.Painter()
        defer {
            sigaction(SIGWINCH, &previous, nil)
            tcsetattr(tty, TCSAFLUSH, &saved)
            write(tty, painter.finish())
        }
        let name = highlighted.map { FilePath(root: nil, [$0]).bytes }
        var browser = FolderBrowser(title: title, access: access, startingAt: origin, highlighting: name)
        var keys = FolderBrowser.Keys(interrupt: withUnsafeBytes(of: saved.c_cc) { $0[Int(VINTR)] })
        while true {
            let size = FolderBrowser.size(of: tty)
            write(tty, painter.paint(browser.frame(width: size.width - 1, height: size.height)))
            var typed = [UInt8](repeating: 0, count: 64)
            let got = typed.withUnsafeMutableBytes { read(tty, $0.baseAddress, $0.count) }
            if got < 0 && errno == EINTR { continue }
            guard got > 0 else { return nil }  // the terminal hung up
            var pressed = keys.feed(Array(typed[..<got]))
            if keys.waiting {
                var more = pollfd(fd: tty, events: Int16(POLLIN), revents: 0)
                if poll(&more, 1, FolderBrowser.Keys.escapeWait) != 1 { pressed += keys.flush() }
            }
            // One key at a time, each on the frame it was typed at: a key acts on what was drawn.
            for (index, key) in pressed.enumerated() {
                switch browser.handle(key) {
                case .chosen(let chosen): return chosen
                case .cancelled: return nil
                case .browsing:
                    if index < pressed.count - 1 { write(tty, painter.paint(browser.frame(width: size.width - 1, height: size.height))) }
                }
            }
        }
    }

    private static func write(_ tty: CInt, _ text: String) {
        var text = text
        text.withUTF8 { _ = Glibc.write(tty, $0.baseAddress, $0.count) }
    }
}

extension Array where Element == UInt8 {
    /// The bytes as a NUL-terminated C string, for a call.
    func withCString<R>(_ body: (UnsafePointer<CChar>) throws -> R) rethrows -> R {
        try (self + [0]).withUnsafeBufferPointer { try body(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self)) }
    }
}
