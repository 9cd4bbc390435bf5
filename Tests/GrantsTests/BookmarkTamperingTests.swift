import Foundation
import Testing
import SystemPackage
import AppSandbox
@testable import Grants
import Sandbox

/// Any change to a bookmark is refused with a status, never a crash.
@Suite struct BookmarkTamperingTests {
    @Test func everySingleByteCorruptionIsInvalid() throws {
        let home = Home()
        let broker = try home.broker()
        let blob = try broker.grant(app: memo, folder: try home.folder("vault"), access: .readOnly).bookmark
        #expect(try broker.resolve(blob, app: memo).status == .fresh)
        for index in blob.indices {
            for flip: UInt8 in [0x01, 0x80, 0xFF] {
                var corrupted = blob
                corrupted[index] ^= flip
                let status = try broker.resolve(corrupted, app: memo).status
                #expect(status == .invalid, "byte \(index) ^ \(flip): \(status)")
            }
        }
    }

    @Test func everyTruncationAndExtensionIsInvalid() throws {
        let home = Home()
        let broker = try home.broker()
        let blob = try broker.grant(app: memo, folder: try home.folder("vault"), access: .readWrite).bookmark
        for length in 0..<blob.count {
            #expect(try broker.resolve(Array(blob.prefix(length)), app: memo).status == .invalid, "length \(length)")
        }
        #expect(try broker.resolve(blob + [0], app: memo).status == .invalid)
    }

    @Test func randomDataIsInvalid() throws {
        let home = Home()
        let broker = try home.broker()
        var generator = SystemRandomNumberGenerator()
        try broker.rotateKey()  // a new state has no key until its first grant
        let header = Bookmark.header(app: memo.rawValue, keyID: try broker.keyring.current().id)
        for round in 0..<2000 {
            let random = (0..<Int.random(in: 0..<400, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            // Half of them behind a genuine header, so they reach the cipher.
            let blob = round.isMultiple(of: 2) ? random : header + random
            #expect(try broker.resolve(blob, app: memo).status == .invalid)
        }
    }

    @Test func aBlobFromAnotherBrokerIsInvalid() throws {
        let mine = Home()
        let theirs = Home()
        let blob = try theirs.broker().grant(app: memo, folder: try theirs.folder("vault"), access: .readWrite).bookmark
        let resolution = try mine.broker().resolve(blob, app: memo)
        #expect(resolution.status == .invalid)
        #expect(resolution.message.contains("key this broker does not have"))
    }

    @Test func aBlobSealedWithTheBrokersKeyButUnknownToTheLedgerIsInvalid() throws {
        // For instance, minted by someone who stole the key but cannot write the ledger.
        let home = Home()
        let broker = try home.broker()
        let vault = try home.folder("vault")
        try broker.rotateKey()  // a new state has no key until its first grant
        let (keyID, key) = try broker.keyring.current()
        let fd = try OwnedDescriptor.openPath(FilePath(vault), follow: true)
        let minted = Bookmark(token: .random(), access: .readWrite, created: 0, identity: try FolderIdentity.of(fd, path: FilePath(vault)), path: FilePath(vault))
        let resolution = try broker.resolve(try minted.seal(app: memo, keyID: keyID, key: key), app: memo)
        #expect(resolution.status == .invalid)
        #expect(resolution.message.contains("not issued by this broker"))
    }

    @Test func aRotatedKeyKeepsOldBookmarksUntilItIsRetired() throws {
        let home = Home()
        let broker = try home.broker()
        let old = try broker.grant(app: memo, folder: try home.folder("vault"), access: .readWrite).bookmark
        try broker.rotateKey()
        let stale = try broker.resolve(old, app: memo)
        #expect(stale.status == .fresh)
        #expect(stale.isStale, "sealed with the old key: re-save")
        let renewed = try broker.renew(stale, app: memo)
        #expect(try broker.resolve(renewed, app: memo).isStale == false)
        #expect(try broker.retireOldKeys() == 1)
        #expect(try broker.resolve(old, app: memo).status == .invalid)
        #expect(try broker.resolve(renewed, app: memo).status == .fresh)
    }
}

@Suite struct AppleStyleAPITests {
    @Test func bookmarkDataResolvesWithAStaleFlagAndRenews() throws {
        let home = Home()
        let broker = try home.broker()
        let vault = try home.folder("vault")
        let data = try broker.bookmarkData(forFolder: vault, app: memo, options: [.withSecurityScope, .securityScopeAllowOnlyReadAccess])
        var isStale = true
        let url = try broker.url(resolvingBookmarkData: data, app: memo, bookmarkDataIsStale: &isStale)
        #expect(!isStale)
        #expect(url.path == vault)
        #expect(url.access == .readOnly)

        try home.move(vault, home.path + "/user/moved")
        let movedURL = try broker.url(resolvingBookmarkData: data, app: memo, bookmarkDataIsStale: &isStale)
        #expect(isStale)
        #expect(movedURL.path == home.path + "/user/moved")
        let renewed = try broker.bookmarkData(renewing: data, app: memo)
        _ = try broker.url(resolvingBookmarkData: renewed, app: memo, bookmarkDataIsStale: &isStale)
        #expect(!isStale)
    }

    @Test func unresolvableBookmarksThrowWithTheirStatus() throws {
        let home = Home()
        let broker = try home.broker()
        let vault = try home.folder("vault")
        let data = try broker.bookmarkData(forFolder: vault, app: memo)
        try FileManager.default.removeItem(atPath: vault)
        var isStale = false
        do {
            _ = try broker.url(resolvingBookmarkData: data, app: memo, bookmarkDataIsStale: &isStale)
            Issue.record("resolved a deleted folder")
        } catch {
            #expect(error.status == .missing)
        }
    }

    @Test func startAndStopAccessingNestAndRevocationEndsAccess() throws {
        let home = Home()
        let broker = try home.broker()
        let data = try broker.bookmarkData(forFolder: try home.folder("vault"), app: memo)
        var isStale = false
        let url = try broker.url(resolvingBookmarkData: data, app: memo, bookmarkDataIsStale: &isStale)
        #expect(url.startAccessingSecurityScopedResource())
        #expect(url.startAccessingSecurityScopedResource())
        #expect(url.outstandingAccesses == 2)
        url.stopAccessingSecurityScopedResource()
        url.stopAccessingSecurityScopedResource()
        url.stopAccessingSecurityScopedResource()  // one too many: stays at zero
        #expect(url.outstandingAccesses == 0)
        _ = try broker.revoke(app: memo)
        #expect(!url.startAccessingSecurityScopedResource())
    }
}
