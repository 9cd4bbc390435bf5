@preconcurrency import Glibc
import Crypto
import Sandbox
import SystemPackage

/// The broker's sealing keys: `keys/<id>.key` (32 random bytes, 0600) and
/// `keys/current`. Rotation adds a key and makes it current; old keys still
/// open old bookmarks (which then resolve as stale, to be re-saved) until
/// they are retired. Keys are read once per keyring; a broker is short-lived.
final class Keyring {
    typealias KeyID = [UInt8]  // 8 bytes
    let folder: String
    private var cache: [KeyID: SymmetricKey] = [:]
    private var currentID: KeyID?

    init(state: StateDirectory) {
        folder = state.path + "/keys"
    }

    /// The current key, created on first use.
    func current() throws(GrantError) -> (id: KeyID, key: SymmetricKey) {
        if let currentID, let key = cache[currentID] { return (currentID, key) }
        if let text = try? AtomicFile.read(folder + "/current", limit: 64),
           let id = Self.decodeHex(String(decoding: text, as: UTF8.self).trimmingTrailingNewline),
           let key = try key(id) {
            currentID = id
            return (id, key)
        }
        return try rotate()
    }

    func key(_ id: KeyID) throws(GrantError) -> SymmetricKey? {
        guard id.count == 8 else { return nil }
        if let cached = cache[id] { return cached }
        let bytes: [UInt8]
        do {
            bytes = try AtomicFile.read(folder + "/" + Self.hex(id) + ".key", limit: 64)
        } catch .noSuchFileOrDirectory {
            return nil
        } catch {
            throw .keyring("reading key \(Self.hex(id)): \(error)")
        }
        guard bytes.count == 32 else { throw .keyring("key \(Self.hex(id)) is damaged (\(bytes.count) bytes)") }
        let key = SymmetricKey(data: bytes)
        cache[id] = key
        return key
    }

    /// Makes a new key current; returns it.
    @discardableResult
    func rotate() throws(GrantError) -> (id: KeyID, key: SymmetricKey) {
        let key = SymmetricKey(size: .bits256)
        let id = (0..<8).map { _ in UInt8.random(in: 0...255) }
        let bytes = key.withUnsafeBytes { Array($0) }
        do {
            try AtomicFile.write(bytes, to: folder + "/" + Self.hex(id) + ".key")
            try AtomicFile.write(Array((Self.hex(id) + "\n").utf8), to: folder + "/current")
        } catch {
            throw .keyring("writing a new key: \(error)")
        }
        cache[id] = key
        currentID = id
        return (id, key)
    }

    /// Deletes every key but the current one: bookmarks sealed with them become invalid.
    func retireOldKeys() throws(GrantError) -> Int {
        let current = Self.hex(try self.current().id)
        let names: [String]
        do { names = try directoryEntries(folder).map(\.name) } catch { throw .keyring("reading \(folder): \(error)") }
        var retired = 0
        for name in names {
            guard name.hasSuffix(".key"), name != current + ".key" else { continue }
            if unlink(folder + "/" + name) == 0 { retired += 1 }
            cache[Self.decodeHex(String(name.dropLast(4))) ?? []] = nil
        }
        return retired
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for byte in bytes { out += [digits[Int(byte >> 4)], digits[Int(byte & 0xF)]] }
        return String(decoding: out, as: UTF8.self)
    }

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
