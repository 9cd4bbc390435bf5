@preconcurrency import Glibc
import CSyscalls
import AppSandbox
import SystemPackage

/// The terminal folder picker. It talks to the user through /dev/tty, not
/// stdin/stdout, so the app that asked cannot type or read its answers.
///
/// Keys: ↑/↓ or k/j move, → or Enter or l opens, ← or Backspace or h goes up,
/// Space or s chooses the folder shown, . shows hidden folders, q or Esc cancels.
struct FolderPicker {
    let title: String
    /// The folder shown, held open: what the person sees is what gets granted,
    /// whatever is renamed or swapped meanwhile.
    var current: OwnedDescriptor
    var showHidden = false
    /// A line shown under the list, such as why a folder could not be opened.
    var notice = ""

    /// One row: a folder, or a symbolic link to one, shown with its target.
    struct Entry: Equatable {
        /// The name's bytes: what it is, UTF-8 or not.
        let name: [UInt8]
        let linkTarget: [UInt8]?
    }

    /// Returns the chosen folder, opened, and its path, or nil when the user
    /// cancelled. The cursor starts on `highlighted` when it is a folder in `start`.
    static func choose(title: String, startingAt start: FilePath, highlighted: FilePath.Component? = nil) throws -> (folder: OwnedDescriptor, path: FilePath)? {
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
        defer {
            tcsetattr(tty, TCSAFLUSH, &saved)
            write(tty, "\u{1B}[?25h\n")
        }
        var picker = FolderPicker(title: title, current: origin)
        let wanted = highlighted.map { FilePath(root: nil, [$0]).bytes }
        let cursor = wanted.flatMap { name in picker.entries().firstIndex { $0.name == name && $0.linkTarget == nil } } ?? 0
        guard picker.loop(tty, cursor: cursor) else { return nil }
        return (picker.current, picker.currentPath)
    }

    /// The path of the folder shown, as the kernel knows it (symlinks resolved).
    var currentPath: FilePath { current.currentPath ?? FilePath("?") }

    /// True when the user chose `current`, false when they cancelled.
    private mutating func loop(_ tty: CInt, cursor start: Int) -> Bool {
        var cursor = start
        while true {
            let rows = entries()
            cursor = min(max(cursor, 0), max(rows.count - 1, 0))
            draw(tty, rows, cursor)
            notice = ""
            switch Self.readKey(tty) {
            case .up: cursor -= 1
            case .down: cursor += 1
            case .open:
                guard !rows.isEmpty else { break }
                let entry = rows[cursor]
                // A folder is opened without following links: if it was swapped
                // for a link since it was listed, the person is told, not moved.
                // A link is followed on purpose, and the header then shows where it led.
                do {
                    current = try .openFolder(entry.name, relativeTo: current, follow: entry.linkTarget != nil)
                    cursor = 0
                } catch {
                    notice = "cannot open \(String(decoding: entry.name, as: UTF8.self)): \(error)"
                }
            case .parent:
                let name = currentPath.lastComponent.map { FilePath(root: nil, [$0]).bytes }
                if let parent = try? OwnedDescriptor.openFolder(Array("..".utf8), relativeTo: current, follow: false) {
                    current = parent
                    cursor = entries().firstIndex { $0.name == name } ?? 0
                }
            case .choose: return true
            case .toggleHidden: showHidden.toggle()
            case .cancel: return false
            case .other: break
            }
        }
    }

    /// The folders in `current`, and the links that lead to folders, sorted.
    func entries() -> [Entry] {
        guard let names = try? current.directoryNames() else { return [] }
        var result: [Entry] = []
        for name in names where showHidden || name.first != UInt8(ascii: ".") {
            var st = stat()
            guard name.withCString({ fstatat(current.rawValue, $0, &st, AT_SYMLINK_NOFOLLOW) }) == 0 else { continue }
            switch st.st_mode & S_IFMT {
            case S_IFDIR:
                result.append(Entry(name: name, linkTarget: nil))
            case S_IFLNK:
                var target = stat()
                guard name.withCString({ fstatat(current.rawValue, $0, &target, 0) }) == 0, target.st_mode & S_IFMT == S_IFDIR,
                      let text = current.linkTarget(name) else { continue }
                result.append(Entry(name: name, linkTarget: text))
            default:
                continue
            }
        }
        return result.sorted { String(decoding: $0.name, as: UTF8.self).lowercased() < String(decoding: $1.name, as: UTF8.self).lowercased() }
    }

    private func draw(_ tty: CInt, _ entries: [Entry], _ cursor: Int) {
        var size = winsize()
        let sized = ioctl(tty, UInt(TIOCGWINSZ), &size) == 0
        let rows = sized && size.ws_row > 8 ? Int(size.ws_row) : 24
        // One row per line, always: a name longer than the terminal would wrap,
        // push the header away and could draw lines of its own.
        let width = sized && size.ws_col > 20 ? Int(size.ws_col) - 3 : 77
        func fit(_ text: String) -> String { text.count <= width ? text : String(text.prefix(width - 1)) + "…" }
        let visible = rows - 6
        let first = max(0, min(cursor - visible / 2, entries.count - visible))
        // Every name is escaped: a folder named with escape sequences must not drive the terminal.
        let here = fit(Printable.path(currentPath))
        var screen = "\u{1B}[?25l\u{1B}[H\u{1B}[2J\(Printable.path(title))\r\n\u{1B}[1m\(here)\u{1B}[0m\r\n\r\n"
        if entries.isEmpty { screen += "  (no folders here)\r\n" }
        for index in first..<min(entries.count, first + visible) {
            let entry = entries[index]
            let label = fit(Printable.path(bytes: entry.name) + (entry.linkTarget.map { " -> " + Printable.path(bytes: $0) + " (link)" } ?? "/"))
            screen += (index == cursor ? "\u{1B}[7m> \(label)\u{1B}[0m" : "  \(label)") + "\r\n"
        }
        if !notice.isEmpty { screen += "\r\n" + Printable.message(notice) + "\r\n" }
        screen += "\r\n↑↓ move  → open  ← up  space: choose \(here)  . hidden  q: cancel"
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

    private static func write(_ tty: CInt, _ text: String) {
        var text = text
        text.withUTF8 { _ = Glibc.write(tty, $0.baseAddress, $0.count) }
    }
}

extension OwnedDescriptor {
    /// The names in this folder, as bytes (read through the O_PATH fd).
    func directoryNames() throws(Errno) -> [[UInt8]] {
        try directoryEntries(FilePath("/proc/self/fd/\(rawValue)")).map(\.rawName)
    }

    /// `readlinkat(2)` of `name` in this folder: the target's bytes.
    func linkTarget(_ name: [UInt8]) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = name.withCString { cName in
            buffer.withUnsafeMutableBytes { readlinkat(rawValue, cName, $0.baseAddress!.assumingMemoryBound(to: CChar.self), Int(PATH_MAX)) }
        }
        return length >= 0 ? Array(buffer[0..<length]) : nil
    }
}

extension Array where Element == UInt8 {
    /// The bytes as a NUL-terminated C string, for a call.
    func withCString<R>(_ body: (UnsafePointer<CChar>) throws -> R) rethrows -> R {
        try (self + [0]).withUnsafeBufferPointer { try body(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self)) }
    }
}
