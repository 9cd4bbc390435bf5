import Crypto
import Sandbox
import SystemPackage

/// A bookmark blob: what an app stores to reach a granted folder again.
///
/// Layout (version 1):
///
///     "SRBM" | version: u8 | key id: 8 bytes | app length: u8 | app id |
///     ChaChaPoly sealed box: nonce (12) | ciphertext | tag (16)
///
/// Everything before the sealed box is authenticated as associated data, so
/// a blob made for one app opens for no other, and its key id says which
/// broker key sealed it. The sealed payload holds what resolution needs,
/// nothing more: the grant token, the access mode, when it was made, the
/// folder's identity and its path at grant time.
struct Bookmark: Equatable {
    static let magic: [UInt8] = Array("SRBM".utf8)
    static let version: UInt8 = 1

    var token: GrantToken
    var access: GrantAccess
    var created: Int64
    var identity: FolderIdentity
    var path: FilePath

    /// Why a blob could not be opened. `wrongApp` means it is genuine but
    /// made for another app; everything else means forged, corrupt or foreign.
    enum OpenError: Error, Equatable {
        case malformed(String)
        case unknownKey
        case wrongApp(String)
        case forged
    }

    func seal(app: AppID, keyID: [UInt8], key: SymmetricKey) throws -> [UInt8] {
        let header = Self.header(app: app.rawValue, keyID: keyID)
        let box = try ChaChaPoly.seal(encodedPayload(), using: key, authenticating: header)
        return header + Array(box.combined)
    }

    /// Reads the header, finds the key, authenticates and decodes.
    static func open(_ blob: [UInt8], app: AppID, keys: (([UInt8]) throws -> SymmetricKey?)) throws -> (Bookmark, keyID: [UInt8]) {
        var reader = ByteReader(blob)
        guard try reader.bytes(4) == magic else { throw OpenError.malformed("not a sandboxed-run bookmark") }
        let version = try reader.byte()
        guard version == Self.version else { throw OpenError.malformed("bookmark version \(version) is not supported") }
        let keyID = try reader.bytes(8)
        let appLength = Int(try reader.byte())
        let appBytes = try reader.bytes(appLength)
        let sealedApp = String(decoding: appBytes, as: UTF8.self)
        let headerLength = reader.offset
        guard let key = try keys(keyID) else { throw OpenError.unknownKey }
        let payload: [UInt8]
        do {
            let box = try ChaChaPoly.SealedBox(combined: reader.rest())
            payload = Array(try ChaChaPoly.open(box, using: key, authenticating: blob[0..<headerLength]))
        } catch {
            throw OpenError.forged
        }
        // Authentic: only now does the app in the header mean anything.
        guard sealedApp == app.rawValue else { throw OpenError.wrongApp(sealedApp) }
        return (try decodePayload(payload), keyID)
    }

    static func header(app: String, keyID: [UInt8]) -> [UInt8] {
        magic + [version] + keyID + [UInt8(app.utf8.count)] + Array(app.utf8)
    }

    private func encodedPayload() -> [UInt8] {
        var writer = ByteWriter()
        writer.bytes(token.bytes)
        writer.byte(access == .readWrite ? 1 : 0)
        writer.integer(created)
        writer.integer(identity.handleType)
        writer.byte(UInt8(identity.handle.count))
        writer.bytes(identity.handle)
        writer.byte(identity.handleIsFID ? 1 : 0)
        writer.integer(identity.device)
        writer.integer(identity.filesystemID)
        writer.integer(identity.filesystemType)
        writer.integer(identity.inode)
        writer.byte(identity.birthSeconds == nil ? 0 : 1)
        writer.integer(identity.birthSeconds ?? 0)
        writer.integer(identity.birthNanoseconds)
        let pathBytes = path.bytes
        writer.integer(UInt16(pathBytes.count))
        writer.bytes(pathBytes)
        return writer.output
    }

    private static func decodePayload(_ payload: [UInt8]) throws -> Bookmark {
        var reader = ByteReader(payload)
        let token = GrantToken(bytes: try reader.bytes(GrantToken.length))
        let access: GrantAccess = try reader.byte() == 1 ? .readWrite : .readOnly
        let created: Int64 = try reader.integer()
        let handleType: Int32 = try reader.integer()
        let handle = try reader.bytes(Int(try reader.byte()))
        let isFID = try reader.byte() == 1
        let device: UInt64 = try reader.integer()
        let fsid: UInt64 = try reader.integer()
        let fsType: UInt64 = try reader.integer()
        let inode: UInt64 = try reader.integer()
        let hasBirth = try reader.byte() == 1
        let birthSeconds: Int64 = try reader.integer()
        let birthNanoseconds: UInt32 = try reader.integer()
        let pathLength: UInt16 = try reader.integer()
        let pathBytes = try reader.bytes(Int(pathLength))
        guard pathBytes.first == UInt8(ascii: "/"), !pathBytes.contains(0) else { throw OpenError.malformed("the folder's path is not an absolute path") }
        let path = FilePath(bytes: pathBytes)
        guard reader.isAtEnd else { throw OpenError.malformed("trailing bytes in the payload") }
        let identity = FolderIdentity(
            handleType: handleType, handle: handle, handleIsFID: isFID, device: device, filesystemID: fsid,
            filesystemType: fsType, inode: inode, birthSeconds: hasBirth ? birthSeconds : nil, birthNanoseconds: birthNanoseconds)
        return Bookmark(token: token, access: access, created: created, identity: identity, path: path)
    }
}

/// Bounds-checked little-endian reading: malformed input throws, never traps.
struct ByteReader {
    private let data: [UInt8]
    private(set) var offset = 0

    init(_ data: [UInt8]) { self.data = data }

    var isAtEnd: Bool { offset == data.count }

    mutating func bytes(_ count: Int) throws -> [UInt8] {
        guard count >= 0, count <= data.count - offset else { throw Bookmark.OpenError.malformed("truncated") }
        defer { offset += count }
        return Array(data[offset..<offset + count])
    }

    mutating func byte() throws -> UInt8 { try bytes(1)[0] }

    mutating func integer<T: FixedWidthInteger>() throws -> T {
        let raw = try bytes(MemoryLayout<T>.size)
        return raw.reversed().reduce(T.zero) { ($0 << 8) | T(truncatingIfNeeded: $1) }
    }

    mutating func rest() -> [UInt8] {
        defer { offset = data.count }
        return Array(data[offset...])
    }
}

struct ByteWriter {
    private(set) var output: [UInt8] = []

    mutating func bytes(_ bytes: [UInt8]) { output += bytes }
    mutating func byte(_ byte: UInt8) { output.append(byte) }
    mutating func integer<T: FixedWidthInteger>(_ value: T) {
        withUnsafeBytes(of: value.littleEndian) { output += $0 }
    }
}
