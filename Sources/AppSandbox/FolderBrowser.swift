@preconcurrency import Glibc
import Grants
import Sandbox
import SystemPackage

/// The terminal folder browser, the one way a person picks a folder on a
/// terminal: `pick` (and `run --on-missing/--on-stale prompt`) drive it on
/// /dev/tty, and an open panel's question drives it on the terminal the
/// launcher relays. It only turns keys into state and state into lines;
/// the caller reads the keys and writes the lines.
///
/// What is highlighted is what is chosen, as in Apple's and GTK's open
/// panels: Space or Enter choose the highlighted folder, → opens it, ←
/// goes up, `c` chooses the folder listed (all of it), which asks first when
/// the grant is read-write and a folder in it is highlighted (it is broader
/// than what the person pointed at).
///
/// What is shown is what is granted: the highlighted folder is opened when
/// it is drawn, its path as the kernel knows it is the one shown, and that
/// descriptor is the one chosen, whatever is renamed or swapped after.
/// Every name is escaped (`Printable`): a folder named with escape sequences
/// cannot drive the terminal. A folder is opened without following a link
/// swapped in for it; a link is shown as a link with its target, and the
/// footer shows where it leads before it can be chosen.
public struct FolderBrowser {
    /// Who asks and for what: shown above the list on every frame, whole (escaped by the caller).
    public let title: [String]
    /// The app's own words, if any: shown on one line of their own below
    /// the title, marked as the app's and cut to fit, never wrapped onto
    /// lines of the launcher's (`appWords` escapes them).
    public let words: String?
    public let access: GrantAccess
    /// The folder listed, held open.
    public private(set) var current: OwnedDescriptor
    private var showHidden = false
    private var cursor = 0
    private var notice = ""
    /// The rows of the last frame: keys act on what was drawn.
    private var rows: [Entry] = []
    /// The listing was cut (`listLimit`, `scanLimit`, `scanTime`): the folder holds more.
    private var cut = false
    /// What the listing was read from: the folder is read again only when it
    /// changed (or on navigation, `.`, a new filter), not for every key.
    private var listed: (device: UInt, inode: UInt, modified: timespec, changed: timespec, hidden: Bool, filter: [UInt8]?)?
    /// Only names holding these bytes (case aside) are listed; `typing`: the person is typing it.
    private var filter: [UInt8]?
    private var typing = false
    /// The highlighted row's folder, opened when it was drawn.
    private var highlighted: Chosen?
    /// Why the highlighted row could not be opened.
    private var highlightProblem: String?
    /// The listed folder, waiting for a yes before a read-write grant of all of it.
    private var confirming: Chosen?
    /// Whether the frame shows the keys (false until the question takes keys).
    public var takesKeys = true
    /// The last frame could not show what a key would choose (the terminal
    /// is too small): until one can, only cancelling does anything.
    private var tooSmall = false

    /// A folder chosen: held open, and its path as it was shown.
    public struct Chosen {
        public let folder: OwnedDescriptor
        public let path: FilePath
    }

    /// One row: a folder, or a symbolic link to one, shown with its target.
    struct Entry: Equatable {
        let name: [UInt8]
        let linkTarget: [UInt8]?
    }

    public enum Outcome {
        case browsing
        case chosen(Chosen)
        case cancelled
    }

    /// `highlighting`: a folder in `start` to put the cursor on.
    public init(title: [String], words: String? = nil, access: GrantAccess, startingAt start: OwnedDescriptor, highlighting: [UInt8]? = nil) {
        self.title = title
        self.words = words
        self.access = access
        current = start
        readIfChanged()
        if let highlighting, let index = rows.firstIndex(where: { $0.name == highlighting && $0.linkTarget == nil }) { cursor = index }
    }

    /// The path of the folder listed, as the kernel knows it (links resolved).
    public var currentPath: FilePath { current.currentPath ?? FilePath("?") }

    /// The keys, as `Keys` decodes them.
    public enum Key: Equatable {
        case up, down, right, left, enter, space, escape, interrupt
        case character(UInt8)
    }

    /// What `key` does to the frame last drawn.
    public mutating func handle(_ key: Key) -> Outcome {
        if tooSmall {
            switch key {
            case .escape, .interrupt, .character(UInt8(ascii: "q")): return .cancelled
            default: return .browsing
            }
        }
        if typing {
            switch key {
            case .interrupt: return .cancelled
            case .enter: typing = false
            case .escape: (typing, filter, cursor) = (false, nil, 0)
            case .character(0x7F), .character(0x08): filter = (filter ?? []).dropLast(); cursor = 0
            case .space: filter = (filter ?? []) + [0x20]; cursor = 0
            case .character(let byte) where (0x21...0x7E).contains(byte) && (filter?.count ?? 0) < 255:
                filter = (filter ?? []) + [byte]
                cursor = 0
            default: break
            }
            if !typing, filter?.isEmpty == true { filter = nil }
            return .browsing
        }
        if let asked = confirming {
            confirming = nil
            switch key {
            case .character(UInt8(ascii: "y")), .character(UInt8(ascii: "Y")): return .chosen(asked)
            case .interrupt: return .cancelled
            default:
                notice = "Not granted: choose again."
                return .browsing
            }
        }
        switch key {
        case .up, .character(UInt8(ascii: "k")): cursor -= 1
        case .down, .character(UInt8(ascii: "j")): cursor += 1
        case .right, .character(UInt8(ascii: "l")): open()
        case .left, .character(UInt8(ascii: "h")), .character(0x7F), .character(0x08): parent()
        case .space, .enter:
            // Nothing highlighted (no folders here): the folder listed is the one shown to be chosen.
            guard !rows.isEmpty else { return .chosen(Chosen(folder: current, path: currentPath)) }
            guard let highlighted else {
                notice = highlightProblem ?? "That folder cannot be chosen."
                return .browsing
            }
            return .chosen(highlighted)
        case .character(UInt8(ascii: "c")):
            let listed = Chosen(folder: current, path: currentPath)
            guard access == .readWrite, !rows.isEmpty else { return .chosen(listed) }
            confirming = listed
        case .character(UInt8(ascii: ".")): showHidden.toggle()
        case .character(UInt8(ascii: "/")): (typing, filter) = (true, filter ?? [])
        case .escape, .interrupt, .character(UInt8(ascii: "q")): return .cancelled
        default: break
        }
        return .browsing
    }

    private mutating func open() {
        guard rows.indices.contains(cursor) else { return }
        let entry = rows[cursor]
        // A folder is opened without following links: if it was swapped for a
        // link since it was listed, the person is told, not moved. A link is
        // followed on purpose, and the header then shows where it led.
        do {
            current = try .openFolder(entry.name, relativeTo: current, follow: entry.linkTarget != nil)
            cursor = 0
            filter = nil
        } catch {
            notice = "Cannot open \(Printable.path(bytes: entry.name)): \(error)"
        }
    }

    private mutating func parent() {
        let name = currentPath.lastComponent.map { FilePath(root: nil, [$0]).bytes }
        guard let up = try? OwnedDescriptor.openFolder(Array("..".utf8), relativeTo: current, follow: false) else { return }
        current = up
        filter = nil
        readIfChanged()
        cursor = rows.firstIndex { $0.name == name && $0.linkTarget == nil } ?? 0
    }

    /// The most folders listed, names read, and seconds spent reading one
    /// folder: a folder of a million entries (an app can make one where the
    /// browser starts) is listed in a bounded time and memory, and the
    /// launcher's loop, which draws the frame, goes on serving the sandbox
    /// (revocations) meanwhile. Past them the frame says the list was cut,
    /// and `/` narrows it to names holding what is typed.
    public static let listLimit = 2000, scanLimit = 100_000, scanTime = 0.25

    /// Reads the folder listed again if it changed since it was read (or
    /// the hidden folders or the filter did), keeping the cursor's place.
    private mutating func readIfChanged() {
        var st = stat()
        guard fstat(current.rawValue, &st) == 0 else {
            (rows, cut, listed) = ([], false, nil)
            return
        }
        if let listed, listed.device == UInt(st.st_dev), listed.inode == UInt(st.st_ino), listed.hidden == showHidden,
           listed.filter == filter, listed.modified.tv_sec == st.st_mtim.tv_sec, listed.modified.tv_nsec == st.st_mtim.tv_nsec,
           listed.changed.tv_sec == st.st_ctim.tv_sec, listed.changed.tv_nsec == st.st_ctim.tv_nsec {
            return
        }
        (rows, cut) = entries()
        listed = (UInt(st.st_dev), UInt(st.st_ino), st.st_mtim, st.st_ctim, showHidden, filter)
    }

    /// The folders in `current`, and the links that lead to folders, sorted
    /// (the first `listLimit` read, `cut` when there were more).
    func entries() -> (rows: [Entry], cut: Bool) {
        // A descriptor of its own: reading moves its offset, not the one `current` shares.
        let fd = openat(current.rawValue, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return ([], false) }
        guard let directory = fdopendir(fd) else {
            close(fd)
            return ([], false)
        }
        defer { closedir(directory) }
        let deadline = Self.clock() + Self.scanTime
        let wanted = filter.map { $0.map(Self.folded) }
        var result: [Entry] = []
        var scanned = 0
        var cut = false
        while let found = readdir(directory) {
            scanned += 1
            let type = found.pointee.d_type
            // The clock is read every 64 names, and before each name that
            // costs a lookup (a link is followed: a chain of links the app
            // made can cost milliseconds each).
            let costly = type == UInt8(DT_LNK) || type == UInt8(DT_UNKNOWN)
            if result.count >= Self.listLimit || scanned > Self.scanLimit || ((costly || scanned % 64 == 0) && Self.clock() > deadline) {
                cut = true
                break
            }
            let name = withUnsafeBytes(of: found.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
            guard name != [0x2E], name != [0x2E, 0x2E], showHidden || name.first != UInt8(ascii: ".") else { continue }
            if let wanted, !Self.holds(name, wanted) { continue }
            var kind = type
            if kind == UInt8(DT_UNKNOWN) {
                var st = stat()
                guard Self.withCString(name, { fstatat(current.rawValue, $0, &st, AT_SYMLINK_NOFOLLOW) }) == 0 else { continue }
                kind = st.st_mode & S_IFMT == S_IFDIR ? UInt8(DT_DIR) : st.st_mode & S_IFMT == S_IFLNK ? UInt8(DT_LNK) : UInt8(DT_REG)
            }
            switch kind {
            case UInt8(DT_DIR):
                result.append(Entry(name: name, linkTarget: nil))
            case UInt8(DT_LNK):
                var target = stat()
                guard Self.withCString(name, { fstatat(current.rawValue, $0, &target, 0) }) == 0, target.st_mode & S_IFMT == S_IFDIR,
                      let text = linkTarget(name) else { continue }
                result.append(Entry(name: name, linkTarget: text))
            default:
                continue
            }
        }
        // Each name's sort key is made once, not at every comparison.
        let sorted = result.map { (key: String(decoding: $0.name, as: UTF8.self).lowercased(), entry: $0) }
            .sorted { $0.key < $1.key }.map(\.entry)
        return (sorted, cut)
    }

    private static func folded(_ byte: UInt8) -> UInt8 { (0x41...0x5A).contains(byte) ? byte + 0x20 : byte }

    /// Whether `name` holds `wanted` (already folded), ASCII case aside.
    private static func holds(_ name: [UInt8], _ wanted: [UInt8]) -> Bool {
        guard !wanted.isEmpty else { return true }
        guard name.count >= wanted.count else { return false }
        return name.withUnsafeBufferPointer { name in
            wanted.withUnsafeBufferPointer { wanted in
                for start in 0...(name.count - wanted.count) {
                    var offset = 0
                    while offset < wanted.count && folded(name[start + offset]) == wanted[offset] { offset += 1 }
                    if offset == wanted.count { return true }
                }
                return false
            }
        }
    }

    static func clock() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    private func linkTarget(_ name: [UInt8]) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = Self.withCString(name) { cName in
            buffer.withUnsafeMutableBytes { readlinkat(current.rawValue, cName, $0.baseAddress!.assumingMemoryBound(to: CChar.self), Int(PATH_MAX)) }
        }
        return length >= 0 ? Array(buffer[0..<length]) : nil
    }

    private static func withCString<R>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) throws -> R) rethrows -> R {
        try (bytes + [0]).withUnsafeBufferPointer { try body(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self)) }
    }

    /// The frame to draw now, at most `height` lines of at most `width`
    /// characters: the folder listed is read again if it changed, and the
    /// highlighted folder opened, so that the path shown for it is the one chosen.
    public mutating func frame(width: Int, height: Int) -> [String] {
        // Wrapping is off while a frame is drawn: a line wider than the
        // terminal is cut there. So widths are counted in columns, per
        // Unicode scalar as terminals count them (a grapheme of forty Hangul
        // jamo takes eighty), a scalar outside ASCII as two (it may be
        // wide), never fewer than it takes; lines are cut and wrapped between scalars.
        func columns(_ scalar: Unicode.Scalar) -> Int { scalar.isASCII ? 1 : 2 }
        func fit(_ text: String) -> String {
            let text = show(text)
            guard text.unicodeScalars.reduce(0, { $0 + columns($1) }) > width else { return text }
            var used = 0
            var out = String.UnicodeScalarView()
            for scalar in text.unicodeScalars {
                used += columns(scalar)
                guard used <= width - 2 else { break }
                out.append(scalar)
            }
            return String(out) + ellipsis
        }
        /// Text in full, on as many lines as it takes: what is granted, and who asks, are never cut.
        func whole(_ text: String, indent: String = "  ") -> [String] {
            var lines: [String] = []
            var line = String.UnicodeScalarView(indent.unicodeScalars)
            var used = indent.count
            for scalar in show(text).unicodeScalars {
                if used + columns(scalar) > width, used > indent.count {
                    lines.append(String(line))
                    (line, used) = (String.UnicodeScalarView(indent.unicodeScalars), indent.count)
                }
                line.append(scalar)
                used += columns(scalar)
            }
            return lines + [String(line)]
        }
        /// What a key would choose cannot be shown whole: say so, and take no choice.
        func small() -> [String] {
            tooSmall = true
            return Array([fit("The terminal is too small to show the folder to choose."),
                          fit("Make it larger, or q: cancel.")].prefix(max(height - 1, 1)))
        }
        tooSmall = false
        guard width >= 20 else { return small() }
        // The app's words on one line, between the launcher's quotes (which they cannot hold: `appWords`).
        let title = self.title.flatMap { whole($0, indent: "") }
            + (words.map { [fit("Its words: " + (unicode ? "\u{201C}\($0)\u{201D}" : "\"\($0)\""))] } ?? [])
        let here = Printable.path(currentPath)
        if let asked = confirming {
            let name = rows.indices.contains(cursor) ? Printable.path(bytes: rows[cursor].name) : ""
            let lines = title
                + [fit("Grant read-write access to this whole folder, and everything in it?")]
                + whole(Printable.path(asked.path))
                + [fit("It holds more than the highlighted \(name)/: every file and folder in it could be read, changed or deleted."),
                   fit("y: yes, grant all of it    any other key: no, back to the list")]
            return lines.count < height ? lines : small()
        }
        readIfChanged()
        cursor = min(max(cursor, 0), max(rows.count - 1, 0))
        highlighted = nil
        highlightProblem = nil
        if rows.indices.contains(cursor) {
            let entry = rows[cursor]
            do {
                let folder = try OwnedDescriptor.openFolder(entry.name, relativeTo: current, follow: entry.linkTarget != nil)
                if let path = folder.currentPath {
                    highlighted = Chosen(folder: folder, path: path)
                } else {
                    // Beyond PATH_MAX (a link can lead there) or deleted: nothing to show, so nothing to grant.
                    highlightProblem = "\(Printable.path(bytes: entry.name)) cannot be chosen: the kernel gives no path for it "
                        + "(it was deleted, or \(PathLimit.exceeded))"
                }
            } catch {
                highlightProblem = "Cannot open \(Printable.path(bytes: entry.name)): \(error)"
            }
        }
        var lines = title + ["\u{1B}[1m" + fit(here) + "\u{1B}[0m"]
        // What Space or Enter choose is shown whole, however long.
        let chooses = rows.isEmpty ? here : highlighted.map { Printable.path($0.path) } ?? "(cannot be chosen)"
        let footer = takesKeys
            ? whole("space or Enter: choose \(chooses)", indent: "")
                + [fit("c: choose all of \(here)"),
                   fit((unicode ? "↑↓ move  → open  ← up" : "j/k move  l open  h up") + "  . hidden  / narrow  q: cancel")]
            : [fit("(keys in a moment)")]
        // The filter being typed, or in force; and a list cut short, with the way to narrow it.
        var narrowing: [String] = []
        if typing {
            narrowing.append(fit("Only names with: " + Printable.path(bytes: filter ?? []) + "_   (Enter: done, Esc: all names)"))
        } else if let filter {
            narrowing.append(fit("Only names with: " + Printable.path(bytes: filter) + "   (/ to change)"))
        }
        if cut {
            narrowing.append(fit("Not all folders here are listed (the first \(Self.listLimit) read): "
                + "/ and part of a name narrows the list, or open a folder and go from there."))
        }
        lines += narrowing
        // One line spare: a frame as tall as the terminal would scroll it, and the next would not find its top.
        let spare = height - 1 - lines.count - footer.count - (notice.isEmpty ? 0 : 1)
        guard spare >= 1 else { return small() }
        let visible = spare
        let first = max(0, min(cursor - visible / 2, rows.count - visible))
        if rows.isEmpty { lines.append(filter == nil ? "  (no folders here)" : "  (no folders here with that in their names)") }
        for index in first..<min(rows.count, first + visible) {
            let entry = rows[index]
            let label = fit("  " + Printable.path(bytes: entry.name) + (entry.linkTarget.map { " -> " + Printable.path(bytes: $0) + " (link)" } ?? "/"))
            lines.append(index == cursor ? "\u{1B}[7m>" + label.dropFirst() + "\u{1B}[0m" : label)
        }
        if !notice.isEmpty { lines.append(fit(notice)) }
        notice = ""
        return lines + footer
    }

    /// Turns bytes read from a terminal into keys: arrows (`ESC [ A`, and
    /// `ESC O A` in cursor-key mode), Enter (CR or LF), Space, Esc, the
    /// interrupt key and Ctrl-D (cancel), and printable characters.
    ///
    /// Everything else a terminal sends is parsed as ECMA-48 says and
    /// dropped whole, never read as keys: control sequences (CSI: parameters,
    /// intermediates, a final byte), SS3, other escape sequences (ESC,
    /// intermediates, a final byte), the strings of OSC, DCS, APC, PM and SOS
    /// (up to ST, `ESC \`, or for OSC also BEL; CAN and SUB abort them), the
    /// 8-bit C1 forms of all of these (raw, or encoded in UTF-8), mouse
    /// reports (X10 `ESC [ M` and three bytes, SGR `ESC [ < … M/m`, urxvt
    /// `ESC [ n;n;n M`) and bracketed pastes. A terminal's reply (an OSC 52
    /// clipboard, a kitty graphics answer) may come long after the command
    /// asked for it, while the question takes keys: so a read that holds any
    /// part of a string, a mouse report or a paste, or that goes on with a
    /// sequence an earlier read began, gives no keys at all. A person's keys
    /// come one sequence at a time.
    public struct Keys {
        let interrupt: UInt8

        public init(interrupt: UInt8 = 0x03) { self.interrupt = interrupt }

        enum State: Equatable {
            case ground
            /// After ESC (or ESC and intermediates).
            case escape(intermediates: Bool)
            /// In a control sequence: what came so far (bounded), for the final byte to judge.
            case csi
            /// After SS3: the next byte is the last.
            case ss3
            /// In a string (OSC when `bellEnds`); `escape`: an ESC came, `\` would end it.
            case string(bellEnds: Bool, escape: Bool)
            /// An X10 mouse report: this many bytes still to come.
            case mouse(left: Int)
        }
        private(set) var state = State.ground
        /// The parameters and intermediates of the control sequence under way (the first few).
        private var sequence: [UInt8] = []
        private var sequenceLength = 0
        /// Inside a bracketed paste (`CSI 200 ~` … `CSI 201 ~`): nothing is a key until it ends.
        private var pasting = false
        /// The byte before was 0xC2, the lead byte of a C1 control encoded in UTF-8 (U+0080–U+009F).
        private var afterC2 = false
        /// Bytes of a multi-byte UTF-8 character still to come (not C1 controls).
        private var continuation = 0

        /// An Esc came alone so far: when nothing follows in a moment
        /// (`escapeWait` ms), `flush` makes it the Esc key.
        public var waiting: Bool { state == .escape(intermediates: false) || state == .string(bellEnds: true, escape: true)
            || state == .string(bellEnds: false, escape: true) }
        public static let escapeWait: CInt = 50

        public mutating func feed(_ bytes: [UInt8]) -> [Key] {
            var keys: [Key] = []
            // A read that goes on with what an earlier one began is a terminal's, not a person's.
            var reply = (state != .ground && state != .escape(intermediates: false)) || pasting
            for byte in bytes {
                if let key = step(byte, reply: &reply) { keys.append(key) }
            }
            return reply || pasting ? keys.filter { $0 == .interrupt } : keys
        }

        /// One byte. `reply`: set when it belongs to a terminal's reply (a string, a mouse report, a paste).
        private mutating func step(_ byte: UInt8, reply: inout Bool) -> Key? {
            // The interrupt key always cancels: the way out of whatever a broken terminal left open.
            if byte == interrupt || (state == .ground && (byte == 0x03 || byte == 0x04)) {
                (state, afterC2, continuation) = (.ground, false, 0)
                return .interrupt
            }
            switch state {
            case .string: reply = true
            case .mouse(let left):
                // Coordinates are bytes of any value (or UTF-8 characters, mode 1005: the rest is in the same read).
                reply = true
                state = left > 1 ? .mouse(left: left - 1) : .ground
                (afterC2, continuation) = (false, 0)
                return nil
            default: break
            }
            // 8-bit C1 controls: raw (not inside a UTF-8 character) or encoded in UTF-8 (C2 80–C2 9F).
            let wasC2 = afterC2
            afterC2 = false
            if (0x80...0x9F).contains(byte) && (wasC2 || continuation == 0) {
                continuation = 0
                return control(byte, reply: &reply)
            }
            if continuation > 0, (0x80...0xBF).contains(byte) {
                continuation -= 1
            } else {
                switch byte {
                case 0xC2: (continuation, afterC2) = (0, true)
                case 0xC3...0xDF: continuation = 1
                case 0xE0...0xEF: continuation = 2
                case 0xF0...0xF4: continuation = 3
                default: continuation = 0
                }
            }
            // CAN and SUB abort any sequence or string.
            if byte == 0x18 || byte == 0x1A {
                state = .ground
                return nil
            }
            switch state {
            case .ground:
                switch byte {
                case 0x1B: state = .escape(intermediates: false)
                case 0x0D, 0x0A: return pasting ? nil : .enter
                case 0x20: return pasting ? nil : .space
                case 0xC2: return nil
                default: return pasting ? nil : .character(byte)
                }
            case .escape(let intermediates):
                return escaped(byte, intermediates: intermediates, reply: &reply)
            case .csi:
                switch byte {
                case 0x1B: state = .escape(intermediates: false)
                case 0x20...0x3F:
                    sequenceLength += 1
                    if sequence.count < 16 { sequence.append(byte) }
                case 0x40...0x7E:
                    state = .ground
                    return finish(byte, reply: &reply)
                default: break  // C0 controls are executed (here: dropped), DEL and GR bytes ignored
                }
            case .ss3:
                switch byte {
                case 0x1B: state = .escape(intermediates: false)
                case 0x00...0x1F: break
                default:
                    state = .ground
                    return pasting ? nil : Self.arrow(byte)
                }
            case .string(let bellEnds, let escape):
                if escape {
                    // ST (`ESC \\`) ends the string; ESC and anything else aborts it and begins an escape sequence.
                    state = .ground
                    if byte != UInt8(ascii: "\\") {
                        state = .escape(intermediates: false)
                        return escaped(byte, intermediates: false, reply: &reply)
                    }
                } else if byte == 0x1B {
                    state = .string(bellEnds: bellEnds, escape: true)
                } else if byte == 0x07 && bellEnds {
                    state = .ground
                }
            case .mouse:
                break
            }
            return nil
        }

        /// A byte after ESC (and intermediates, 0x20–0x2F).
        private mutating func escaped(_ byte: UInt8, intermediates: Bool, reply: inout Bool) -> Key? {
            switch byte {
            case 0x1B: state = .escape(intermediates: false)
            case 0x20...0x2F: state = .escape(intermediates: true)
            case 0x00...0x1F: break  // C0 controls inside are executed (here: dropped)
            case 0x40...0x5F where !intermediates:
                // The 7-bit form of a C1 control: CSI, SS3, the strings, ST.
                state = .ground
                return control(byte + 0x40, reply: &reply)
            default:
                // Another final byte (Alt and a key, or a terminal's escape sequence): dropped.
                state = .ground
            }
            return nil
        }

        /// A C1 control (8-bit, or ESC and its 7-bit form): what it begins.
        private mutating func control(_ c1: UInt8, reply: inout Bool) -> Key? {
            switch c1 {
            case 0x9B:  // CSI
                state = .csi
                sequence = []
                sequenceLength = 0
            case 0x8F: state = .ss3  // SS3
            case 0x9D: state = .string(bellEnds: true, escape: false)  // OSC
            case 0x90, 0x98, 0x9E, 0x9F: state = .string(bellEnds: false, escape: false)  // DCS, SOS, PM, APC
            case 0x9C: state = .ground  // ST: ends a string (8-bit), or nothing
            default:
                // ESC and another final byte (Alt and a key, or a terminal's
                // escape sequence), or a C1 control that begins nothing: dropped.
                state = .ground
            }
            return nil
        }

        /// The final byte of a control sequence: an arrow, or dropped.
        private mutating func finish(_ final: UInt8, reply: inout Bool) -> Key? {
            let parameters = sequence
            let length = sequenceLength
            sequence = []
            sequenceLength = 0
            // Mouse reports: X10 (`CSI M` and three bytes), SGR (`CSI < … M/m`), urxvt (`CSI n;n;n M`).
            if final == UInt8(ascii: "M") && length == 0 {
                reply = true
                state = .mouse(left: 3)
                return nil
            }
            if final == UInt8(ascii: "M") || (final == UInt8(ascii: "m") && parameters.first == UInt8(ascii: "<")) {
                reply = true
                return nil
            }
            if final == UInt8(ascii: "~") {
                if parameters == Array("200".utf8) { pasting = true; reply = true }
                if parameters == Array("201".utf8) { pasting = false; reply = true }
                return nil
            }
            // Private markers and intermediates, and the finals of reports
            // (cursor position, device attributes and status, modes, window): a terminal's reply.
            let plain = length == parameters.count && parameters.allSatisfy { (0x30...0x3B).contains($0) && $0 != 0x3A }
            if !plain || Array("cnRtxy".utf8).contains(final) {
                reply = true
                return nil
            }
            // Arrows, with no parameters or a modifier (`CSI 1 ; 5 A`).
            return pasting ? nil : Self.arrow(final)
        }

        /// The arrow a CSI or SS3 sequence's final byte names, if any.
        static func arrow(_ final: UInt8) -> Key? {
            switch final {
            case UInt8(ascii: "A"): .up
            case UInt8(ascii: "B"): .down
            case UInt8(ascii: "C"): .right
            case UInt8(ascii: "D"): .left
            default: nil
            }
        }

        /// Nothing followed for `escapeWait` ms: a lone Esc (also one
        /// inside a string left open: the person's way out) is Esc, and
        /// cancels. A sequence or string under way stays under way:
        /// a reply can arrive in parts, slowly, and its rest is no key either.
        public mutating func flush() -> [Key] {
            switch state {
            case .escape(intermediates: false), .string(_, escape: true):
                state = .ground
                return [.escape]
            default:
                return []
            }
        }
    }

    /// Draws frames in place, below the cursor: each frame moves back to
    /// the first line of the one before and erases down, so that the screen
    /// above (the command's, or the shell's) stays. Wrapping is off while a
    /// frame is drawn, so a line too wide for the terminal cannot push the
    /// frame out of place.
    public struct Painter {
        private var drawn = 0
        /// Written before each line (the launcher's mark), of `prefixWidth` columns.
        let prefix: String
        public let prefixWidth: Int

        public init(prefix: String = "", prefixWidth: Int = 0) {
            self.prefix = prefix
            self.prefixWidth = prefixWidth
        }

        public mutating func paint(_ lines: [String]) -> String {
            var out = "\u{1B}[?7l\r"
            if drawn > 1 { out += "\u{1B}[\(drawn - 1)A" }
            out += "\u{1B}[J" + lines.map { prefix + $0 + "\u{1B}[0m" }.joined(separator: "\r\n") + "\u{1B}[?7h"
            drawn = lines.count
            return out
        }

        /// Ends the last frame: the cursor on a fresh line below it.
        public mutating func finish() -> String {
            defer { drawn = 0 }
            return drawn > 0 ? "\r\n" : ""
        }
    }

    /// Whether the terminal shows UTF-8: the person's locale says so (and the
    /// launcher's question puts the terminal back into UTF-8 first, `ESC % G`).
    /// Otherwise everything drawn is ASCII, every other character escaped:
    /// UTF-8 bytes read as ISO 8859-1 hold C1 controls (0x80–0x9F: CSI, OSC,
    /// reverse index…), with which a folder's name could drive the terminal.
    public var unicode = FolderBrowser.localeIsUTF8

    public static let localeIsUTF8: Bool = {
        let names: [String] = ["LC_ALL", "LC_CTYPE", "LANG"]
        let locale = names.lazy.compactMap { (name: String) -> String? in getenv(name).map { String(cString: $0) } }.first { !$0.isEmpty } ?? ""
        let lowered = locale.lowercased()
        return lowered.contains("utf-8") || lowered.contains("utf8")
    }()

    private var ellipsis: String { unicode ? "…" : "..." }

    /// `text` as drawn: as it is, or with every character outside ASCII escaped (`unicode`).
    func show(_ text: String) -> String { unicode ? text : Self.ascii(text) }

    /// Every scalar outside ASCII as `\u{…}` (text already `Printable`: its backslashes are escaped).
    public static func ascii(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            if scalar.isASCII { out.unicodeScalars.append(scalar) } else { out += "\\u{" + String(scalar.value, radix: 16) + "}" }
        }
        return out
    }

    /// An app's words for a question: escaped (`Printable`), in ASCII
    /// whatever the terminal (every other character as `\u{…}`: nothing
    /// the app writes can make a byte 0x80–0x9F, and it cannot write the
    /// launcher's quotes “ ”), a `"` as `\"`, and runs of spaces as one.
    public static func appWords(_ text: String) -> String {
        var out = ""
        for scalar in ascii(Printable.path(text)).unicodeScalars {
            if scalar == " " && out.hasSuffix(" ") { continue }
            if scalar == "\"" { out += "\\" }
            out.unicodeScalars.append(scalar)
        }
        return out
    }

    /// The access asked for, in words: "to read and write" or "read-only".
    public static func describe(_ access: GrantAccess) -> String {
        access == .readWrite ? "to read and write (read-write)" : "to read only (read-only)"
    }

    /// The terminal's size (however small: `frame` says when it is too
    /// small), or 80×24 when it gives none.
    public static func size(of terminal: CInt) -> (width: Int, height: Int) {
        var size = winsize()
        guard ioctl(terminal, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0, size.ws_row > 0 else { return (80, 24) }
        return (Int(size.ws_col), Int(size.ws_row))
    }
}
