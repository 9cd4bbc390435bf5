@preconcurrency import Glibc
import Crypto
import Sandbox
import SystemPackage

/// The broker's sealing keys: `keys/<id>.key` (exactly 32 random bytes,
/// 0600) and `keys/current`. Rotation adds a key and makes it current; old
/// keys still open old bookmarks (which then resolve as stale, to be
/// re-saved) until they are retired. Keys are read once per keyring; a
/// broker is short-lived.
///
/// Everything is reached through the checked `keys` folder's descriptor,
/// with O_NOFOLLOW, and written whole (a new file, then renameat). Keys are
/// made and rotated only under the state's exclusive lock, after reading
/// `current` again, so concurrent first uses make one key, not one each.
final class Keyring {
    typealias KeyID = [UInt8]  // 8 bytes
    static let folderName = "keys"
    let state: StateDirectory
    /// `keys/`, once it exists.
    private(set) var folder: OwnedDescriptor?
    private var cache = Cache()
    private var currentID: KeyID?

    /// Keys read so far, by id. A handful, so a list: a dictionary keyed by
    /// bytes costs more at its first use, on every launch with a grant,
    /// than all its lookups.
    private struct Cache {
        private var entries: [(id: KeyID, key: SymmetricKey)] = []
        subscript(id: KeyID) -> SymmetricKey? {
            get { entries.first { $0.id == id }?.key }
            set {
                entries.removeAll { $0.id == id }
                if let newValue { entries.append((id, newValue)) }
            }
        }
    }

    var folderPath: String { state.path + "/" + Self.folderName }

    init(state: StateDirectory) {
        self.state = state
    }

    /// Opens and checks `keys/` if it exists.
    func attach() throws(GrantError) -> Bool {
        do {
            folder = try StateDirectory.openFolder(Self.folderName, in: state.descriptor, create: false)
        } catch .noSuchFileOrDirectory {
            folder = nil
            return false
        } catch .tooManySymbolicLinkLevels, .notDirectory {
            throw StateDirectory.notARealFolder(Self.folderName, in: state.descriptor, path: folderPath)
        } catch {
            throw .stateDirectory(step: "opening \(folderPath)", errno: error)
        }
        do {
            try StateDirectory.checkPrivate(try folder!.status(), path: folderPath, kind: S_IFDIR)
        } catch let error as GrantError {
            throw error
        } catch {
            throw .stateDirectory(step: "reading \(folderPath)", errno: error as? Errno ?? .ioError)
        }
        cache = Cache()
        currentID = nil
        return true
    }

    /// The key files present, and whether `current` is.
    func inventory() throws(GrantError) -> (keys: [KeyID], hasCurrent: Bool) {
        guard let folder else { return ([], false) }
        let names: [String]
        do { names = try Self.names(in: folder) } catch { throw .stateDirectory(step: "reading \(folderPath)", errno: error) }
        let keys = names.compactMap { name -> KeyID? in
            guard name.hasSuffix(".key"), name.utf8.count == 20 else { return nil }
            return Self.decodeHex(String(name.dropLast(4)))
        }
        return (keys, names.contains("current"))
    }

    /// The id `current` names; nil when there is no `current`. Throws when
    /// it is untrusted or not an id.
    func readCurrentID() throws(GrantError) -> KeyID? {
        guard let folder else { return nil }
        let path = folderPath + "/current"
        guard let file = try StateDirectory.openPrivateFile("current", in: folder, path: path) else { return nil }
        let text: [UInt8]
        do { text = try StateDirectory.readAll(file.descriptor, limit: 64) } catch {
            throw .stateDirectory(step: "reading \(path)", errno: error)
        }
        guard let id = Self.decodeHex(String(decoding: text, as: UTF8.self).trimmingTrailingNewline), id.count == 8 else {
            throw .damagedState(
                path: path, problem: "does not hold a key id",
                fix: "Restore it from a backup, or write into it the name (without .key) of the newest file in \(folderPath).")
        }
        return id
    }

    /// The current key. Never makes one: a state without keys is made by
    /// the broker, under the lock (`makeFolder`).
    func current() throws(GrantError) -> (id: KeyID, key: SymmetricKey) {
        guard let current = try currentIfPresent() else {
            throw .damagedState(
                path: folderPath + "/current", problem: "is missing",
                fix: "Restore it from a backup, or write into it the name (without .key) of the newest file in \(folderPath).")
        }
        return current
    }

    /// The current key, or nil when there is no `current`; throws as
    /// `current()` does when it names no good key.
    func currentIfPresent() throws(GrantError) -> (id: KeyID, key: SymmetricKey)? {
        if let currentID, let key = cache[currentID] { return (currentID, key) }
        guard let id = try readCurrentID() else { return nil }
        guard let key = try key(id) else {
            throw .damagedState(
                path: folderPath + "/current", problem: "names key \(Self.hex(id)), which is missing",
                fix: "Restore \(folderPath)/\(Self.hex(id)).key from a backup, or write the name of an existing key into it.")
        }
        currentID = id
        return (id, key)
    }

    /// The id of the current key, or nil when there are no keys yet.
    func currentIDIfAny() throws(GrantError) -> KeyID? {
        guard folder != nil else { return nil }
        return try current().id
    }

    func key(_ id: KeyID) throws(GrantError) -> SymmetricKey? {
        guard id.count == 8, let folder else { return nil }
        if let cached = cache[id] { return cached }
        let name = Self.hex(id) + ".key"
        let path = folderPath + "/" + name
        guard let file = try StateDirectory.openPrivateFile(name, in: folder, path: path) else { return nil }
        let bytes: [UInt8]
        do { bytes = try StateDirectory.readAll(file.descriptor, limit: 64) } catch {
            throw .stateDirectory(step: "reading \(path)", errno: error)
        }
        guard bytes.count == 32 else {
            throw .damagedState(path: path, problem: "is damaged (\(bytes.count) bytes, not 32)", fix: "Restore it from a backup.")
        }
        let key = SymmetricKey(data: bytes)
        cache[id] = key
        return key
    }

    /// Makes `keys/` with a first key: built under a temporary name, then
    /// renamed into place, so `keys/` appears whole or not at all. Call
    /// under the exclusive lock.
    func makeFolder() throws(GrantError) {
        let temporary = Self.folderName + ".tmp-" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
        do {
            let made = try StateDirectory.openFolder(temporary, in: state.descriptor, create: true)
            _ = try syscallRetrying { fchmod(made.rawValue, 0o700) }
            folder = made
            _ = try writeNewKey()
            _ = try syscallRetrying { fsync(made.rawValue) }
            _ = try syscallRetrying { renameat(state.descriptor.rawValue, temporary, state.descriptor.rawValue, Self.folderName) }
            fsync(state.descriptor.rawValue)
        } catch {
            Self.removeTree(temporary, in: state.descriptor)
            folder = nil
            throw error as? GrantError ?? .keyring("making \(folderPath): \(error)")
        }
    }

    /// Makes a new key current; returns it. Call under the exclusive lock.
    @discardableResult
    func rotate() throws(GrantError) -> (id: KeyID, key: SymmetricKey) {
        do {
            return try writeNewKey()
        } catch {
            throw error as? GrantError ?? .keyring("writing a new key in \(folderPath): \(error)")
        }
    }

    private func writeNewKey() throws -> (id: KeyID, key: SymmetricKey) {
        guard let folder else { throw GrantError.keyring("\(folderPath) is missing") }
        let key = SymmetricKey(size: .bits256)
        let id = (0..<8).map { _ in UInt8.random(in: 0...255) }
        let bytes = key.withUnsafeBytes { Array($0) }
        try AtomicFile.replace(Self.hex(id) + ".key", in: folder, with: bytes, mode: 0o600)
        try AtomicFile.replace("current", in: folder, with: Array((Self.hex(id) + "\n").utf8), mode: 0o600)
        cache[id] = key
        currentID = id
        return (id, key)
    }

    /// Deletes every key but the current one: bookmarks sealed with them
    /// become invalid. Call under the exclusive lock.
    func retireOldKeys() throws(GrantError) -> Int {
        guard let folder else { return 0 }
        currentID = nil
        let current = Self.hex(try self.current().id)
        let names: [String]
        do { names = try Self.names(in: folder) } catch { throw .stateDirectory(step: "reading \(folderPath)", errno: error) }
        var retired = 0
        for name in names {
            guard name.hasSuffix(".key"), name != current + ".key" else { continue }
            if unlinkat(folder.rawValue, name, 0) == 0 { retired += 1 }
            cache[Self.decodeHex(String(name.dropLast(4))) ?? []] = nil
        }
        return retired
    }

    /// Removes what an interrupted write left: `keys.tmp-*` folders and
    /// `*.tmp-*` files. Call under the exclusive lock.
    func removeLeftovers() {
        if let names = try? Self.names(in: state.descriptor) {
            for name in names where name.hasPrefix(Self.folderName + ".tmp-") { Self.removeTree(name, in: state.descriptor) }
        }
        if let folder, let names = try? Self.names(in: folder) {
            for name in names where name.contains(".tmp-") { unlinkat(folder.rawValue, name, 0) }
        }
    }

    /// The names in a folder reached by descriptor.
    static func names(in folder: OwnedDescriptor) throws(Errno) -> [String] {
        let readable = try folder.reopenedFolder()
        let dir = try directoryStream(taking: readable)  // a fresh open: the stream can have it
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            if name != ".", name != ".." { names.append(name) }
        }
        return names
    }

    /// Removes a temporary folder of files (never following links).
    static func removeTree(_ name: String, in folder: OwnedDescriptor) {
        if let inner = try? StateDirectory.openFolder(name, in: folder, create: false), let names = try? names(in: inner) {
            for entry in names { unlinkat(inner.rawValue, entry, 0) }
        }
        unlinkat(folder.rawValue, name, AT_REMOVEDIR)
    }

    static func hex(_ bytes: [UInt8]) -> String { Printable.hex(bytes) }

    static func decodeHex(_ text: String) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        for index in stride(from: 0, to: chars.count, by: 2) {
            guard let high = nibble(chars[index]), let low = nibble(chars[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }

    private static func nibble(_ char: UInt8) -> UInt8? {
        switch char {
        case 0x30...0x39: char - 0x30
        case 0x61...0x66: char - 0x61 + 10
        case 0x41...0x46: char - 0x41 + 10
        default: nil
        }
    }
}

extension String {
    var trimmingTrailingNewline: String {
        var copy = self
        while copy.hasSuffix("\n") { copy.removeLast() }
        return copy
    }
}
