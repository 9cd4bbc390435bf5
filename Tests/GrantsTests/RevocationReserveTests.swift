import Foundation
import Testing
@testable import Grants
import Sandbox

/// The revocation reserve (`RevocationReserve`): made whole with the state,
/// a held revocation honoured by every reader (the launch cache's path, the
/// ledger's, `list`, `liveness`) and folded into the ledger by its next
/// write; torn slots ignored; a damaged reserve refused; a full one never
/// blocking a ledger that can be written. The full disk itself is in
/// `FullDiskRevocationTests` (CLI, tmpfs in a mount namespace).
@Suite struct RevocationReserveTests {
    var reservePath: (Home) -> String { { $0.statePath + "/" + RevocationReserve.fileName } }

    func grant(_ home: Home, _ name: String, app: AppID = memo) throws -> GrantBroker.Issued {
        try home.broker().grant(app: app, folder: try home.folder(name), access: .readWrite)
    }

    func state(_ home: Home) throws -> StateDirectory { try StateDirectory(path: home.statePath) }

    /// What a `revoke` leaves when the ledger cannot be written: the slot alone.
    func hold(_ target: RevocationReserve.Target, in home: Home, at time: Int64 = 1_700_000_000) throws {
        var reserve = try #require(try RevocationReserve.open(in: try state(home)))
        try reserve.hold(target, at: time, named: [])
    }

    @Test func theStateIsMadeWithAWholeReserve() throws {
        let home = Home()
        _ = try grant(home, "vault")
        var st = stat()
        #expect(lstat(reservePath(home), &st) == 0)
        #expect(st.st_mode & S_IFMT == S_IFREG && st.st_mode & 0o777 == 0o600)
        #expect(st.st_size == 16384)
        // Real blocks, not a hole: overwriting them needs no allocation.
        #expect(Int(st.st_blocks) * 512 >= 16384, "\(st.st_blocks) blocks")
        let reserve = try #require(try RevocationReserve.open(in: try state(home)))
        #expect(reserve.entries.isEmpty && reserve.free.count == RevocationReserve.slotCount)
    }

    @Test func aStateWithoutAReserveGetsOneAtItsNextWrite() throws {
        let home = Home()
        _ = try grant(home, "vault")
        #expect(unlink(reservePath(home)) == 0)
        #expect(try home.broker().resolve(try grant(home, "other").bookmark, app: memo).status == .fresh)
        #expect(FileManager.default.fileExists(atPath: reservePath(home)))
    }

    @Test func aHeldRevocationIsHonouredByEveryReaderAndFoldedByTheNextWrite() throws {
        let home = Home()
        let vault = try grant(home, "vault")
        let photos = try grant(home, "photos")
        let other = try grant(home, "other", app: try AppID("com.example.other"))
        // A launch has cached both: the cache path must see the reserve.
        for issued in [vault, photos] { #expect(try home.broker().resolve(issued.bookmark, app: memo).status == .fresh) }
        let cached = try home.broker()
        #expect(try cached.resolve(vault.bookmark, app: memo).status == .fresh && cached.ledgerLookups == 0)

        try hold(.app(memo.rawValue), in: home)
        let launch = try home.broker()
        #expect(try launch.resolve(vault.bookmark, app: memo).status == .revoked)
        #expect(try launch.resolve(photos.bookmark, app: memo).status == .revoked)
        #expect(try launch.resolve(other.bookmark, app: try AppID("com.example.other")).status == .fresh)
        #expect(try home.broker().liveness(of: [vault.id, other.id]) == [vault.id: false, other.id: true])
        let listed = try home.broker().list()
        #expect(listed.filter { $0.app == memo.rawValue }.allSatisfy { $0.revoked == 1_700_000_000 })
        #expect(try home.broker().heldRevocations() == 1)

        // The next write folds it in, then the grant it makes is live (the
        // app's slot named only what the ledger held).
        let later = try grant(home, "later")
        #expect(try home.broker().heldRevocations() == 0)
        #expect(try RevocationReserve.open(in: try state(home))?.entries.isEmpty == true)
        #expect(try home.broker().resolve(vault.bookmark, app: memo).status == .revoked, "now from the ledger")
        #expect(try home.broker().resolve(later.bookmark, app: memo).status == .fresh)
        #expect(try home.broker().list().first { $0.id == vault.id }?.revoked == 1_700_000_000, "the time held is the time recorded")
    }

    @Test func revokeByFolderAndByGrantTakesOneSlotAndLeavesNothingHeld() throws {
        let home = Home()
        let vault = try grant(home, "vault")
        let photos = try grant(home, "photos")
        let outcome = try home.broker().revoke(.folder(home.path + "/user/vault"))
        #expect(outcome.revoked == 1 && outcome.named == [vault.id] && outcome.notInLedger == nil)
        #expect(try home.broker().revoke(grant: String(photos.id.hex.prefix(12))) == 1)
        #expect(try home.broker().heldRevocations() == 0, "the ledger could be written: nothing stays held")
        #expect(try home.broker().resolve(photos.bookmark, app: memo).status == .revoked)
    }

    @Test func aTornSlotIsIgnoredAndReused() throws {
        let home = Home()
        let vault = try grant(home, "vault")
        // A crash in mid-write: the id written, the checksum not.
        var slot = RevocationReserve.encode(.grant(vault.id), time: 1)
        slot[RevocationReserve.slotSize - 1] ^= 0xFF
        let file = try FileHandle(forUpdating: URL(fileURLWithPath: reservePath(home)))
        try file.seek(toOffset: UInt64(RevocationReserve.slotSize))
        try file.write(contentsOf: Data(slot))
        try file.close()
        #expect(try home.broker().resolve(vault.bookmark, app: memo).status == .fresh)
        let reserve = try #require(try RevocationReserve.open(in: try state(home)))
        #expect(reserve.entries.isEmpty && reserve.free.first == 1)
    }

    @Test func aFullReserveDoesNotBlockALedgerThatCanBeWritten() throws {
        let home = Home()
        let vault = try grant(home, "vault")
        for index in 0..<RevocationReserve.slotCount {
            try hold(.grant(GrantID(digest: [UInt8](repeating: UInt8(index), count: 32))), in: home)
        }
        let outcome = try home.broker().revoke(.grant(vault.id.hex))
        #expect(outcome.revoked == 1 && outcome.notInLedger == nil)
        #expect(try home.broker().heldRevocations() == 0, "folded in, the reserve freed")
        #expect(try home.broker().resolve(vault.bookmark, app: memo).status == .revoked)
    }

    @Test func aDamagedReserveIsRefusedNotIgnored() throws {
        let home = Home()
        let vault = try grant(home, "vault")
        func refused(_ fragment: String) throws {
            do {
                let status = try home.broker().resolve(vault.bookmark, app: memo).status
                Issue.record("resolved \(status) with a damaged reserve")
            } catch {
                #expect("\(error)".contains(reservePath(home)) && "\(error)".contains(fragment), "\(error)")
            }
        }
        let original = try Data(contentsOf: URL(fileURLWithPath: reservePath(home)))
        try original.prefix(8192).write(to: URL(fileURLWithPath: reservePath(home)))
        try refused("is 8192 bytes, not 16384")
        // A whole slot of a kind this version does not know (a newer one's revocation).
        var unknown = RevocationReserve.encode(.grant(vault.id), time: 1)
        unknown[0] = 9
        unknown = RevocationReserve.sealed(unknown)
        var bytes = [UInt8](original)
        bytes.replaceSubrange(512..<1024, with: unknown)
        try Data(bytes).write(to: URL(fileURLWithPath: reservePath(home)))
        try refused("of a kind (9) this sandboxed-run does not know")
        bytes = [UInt8](original)
        bytes[0] = UInt8(ascii: "X")
        try Data(bytes).write(to: URL(fileURLWithPath: reservePath(home)))
        try refused("does not start with its header")
        try Data(original).write(to: URL(fileURLWithPath: reservePath(home)))
        #expect(chmod(reservePath(home), 0o644) == 0)
        try refused("is accessible to group or others")
    }
}
