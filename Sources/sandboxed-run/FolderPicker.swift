@preconcurrency import Glibc
import Grants
import Sandbox

/// The terminal folder picker. It talks to the user through /dev/tty, not
/// stdin/stdout, so the app that asked cannot type or read its answers.
///
/// Keys: ↑/↓ or k/j move, → or Enter or l opens, ← or Backspace or h goes up,
/// Space or s chooses the folder shown, . shows hidden folders, q or Esc cancels.
struct FolderPicker {
    let title: String
    var current: String
    var showHidden = false

    /// Returns the chosen folder, or nil when the user cancelled. The cursor
    /// starts on `highlighted` when it is a folder in `start`.
    static func choose(title: String, startingAt start: String, highlighted: String? = nil) throws -> String? {
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC)
        guard tty >= 0 else {
            throw GrantError.bookmarkFile(path: "/dev/tty", problem: "no terminal to ask on: pass --select PATH to choose without asking")
        }
        defer { close(tty) }
        var saved = termios()
        guard tcgetattr(tty, &saved) == 0 else {
            throw GrantError.bookmarkFile(path: "/dev/tty", problem: "not a terminal: pass --select PATH")
        }
        var raw = saved
        raw.c_lflag &= ~tcflag_t(ICANON | ECHO | ISIG)
        raw.c_cc.6 = 1  // VMIN
        raw.c_cc.5 = 0  // VTIME
        tcsetattr(tty, TCSAFLUSH, &raw)
        defer {
            tcsetattr(tty, TCSAFLUSH, &saved)
            write(tty, "\u{1B}[?25h\n")
        }
        var picker = FolderPicker(title: title, current: start)
        return picker.loop(tty, cursor: highlighted.flatMap { picker.subfolders().firstIndex(of: $0) } ?? 0)
    }

    private mutating func loop(_ tty: CInt, cursor start: Int) -> String? {
        var cursor = start
        while true {
            let entries = subfolders()
            cursor = min(max(cursor, 0), max(entries.count - 1, 0))
            draw(tty, entries, cursor)
            switch Self.readKey(tty) {
            case .up: cursor -= 1
            case .down: cursor += 1
            case .open:
                if !entries.isEmpty {
                    current = join(current, entries[cursor])
                    cursor = 0
                }
            case .parent:
                let name = String(current.split(separator: "/").last ?? "")
                current = parent(of: current)
                cursor = subfolders().firstIndex(of: name) ?? 0
            case .choose: return current
            case .toggleHidden: showHidden.toggle()
            case .cancel: return nil
            case .other: break
            }
        }
    }

    private func subfolders() -> [String] {
        // stat, not d_type: a symlink to a folder is a folder to a person.
        let names = ((try? directoryEntries(current)) ?? []).map(\.name).filter { name in
            var st = stat()
            return (showHidden || !name.hasPrefix(".")) && stat(join(current, name), &st) == 0 && st.st_mode & S_IFMT == S_IFDIR
        }
        return names.sorted { $0.lowercased() < $1.lowercased() }
    }

    private func draw(_ tty: CInt, _ entries: [String], _ cursor: Int) {
        var size = winsize()
        let rows = ioctl(tty, UInt(TIOCGWINSZ), &size) == 0 && size.ws_row > 8 ? Int(size.ws_row) : 24
        let visible = rows - 6
        let first = max(0, min(cursor - visible / 2, entries.count - visible))
        var screen = "\u{1B}[?25l\u{1B}[H\u{1B}[2J\(title)\r\n\u{1B}[1m\(current)\u{1B}[0m\r\n\r\n"
        if entries.isEmpty { screen += "  (no folders here)\r\n" }
        for index in first..<min(entries.count, first + visible) {
            screen += (index == cursor ? "\u{1B}[7m> \(entries[index])/\u{1B}[0m" : "  \(entries[index])/") + "\r\n"
        }
        screen += "\r\n↑↓ move  → open  ← up  space: choose \(current)  . hidden  q: cancel"
        Self.write(tty, screen)
    }

    enum Key { case up, down, open, parent, choose, toggleHidden, cancel, other }

    private static func readKey(_ tty: CInt) -> Key {
        var byte: UInt8 = 0
        guard read(tty, &byte, 1) == 1 else { return .cancel }
        switch byte {
        case UInt8(ascii: "k"): return .up
        case UInt8(ascii: "j"): return .down
        case UInt8(ascii: "l"), 0x0D, 0x0A: return .open
        case UInt8(ascii: "h"), 0x7F, 0x08: return .parent
        case UInt8(ascii: " "), UInt8(ascii: "s"): return .choose
        case UInt8(ascii: "."): return .toggleHidden
        case UInt8(ascii: "q"), 0x03, 0x04: return .cancel
        case 0x1B:
            var pending = pollfd(fd: tty, events: Int16(POLLIN), revents: 0)
            guard poll(&pending, 1, 50) == 1 else { return .cancel }  // a lone Esc
            var sequence: [UInt8] = [0, 0]
            guard read(tty, &sequence, 2) == 2, sequence[0] == UInt8(ascii: "[") else { return .other }
            switch sequence[1] {
            case UInt8(ascii: "A"): return .up
            case UInt8(ascii: "B"): return .down
            case UInt8(ascii: "C"): return .open
            case UInt8(ascii: "D"): return .parent
            default: return .other
            }
        default: return .other
        }
    }

    private func join(_ folder: String, _ name: String) -> String { folder == "/" ? "/" + name : folder + "/" + name }

    private func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }

    private static func write(_ tty: CInt, _ text: String) {
        var text = text
        text.withUTF8 { _ = Glibc.write(tty, $0.baseAddress, $0.count) }
    }
}
