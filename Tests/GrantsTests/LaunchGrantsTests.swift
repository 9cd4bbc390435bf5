import Foundation
import Testing
import SystemPackage
@testable import AppSandbox
@testable import Grants
@testable import Sandbox

/// `run --grant` as a library: what a Swift program gets without the CLI.
@Suite struct LaunchGrantsTests {
    @Test func aMovedFolderIsFollowedOnlyWhenAskedAndTheBookmarkRewrittenInPlace() throws {
        let home = Home()
        let broker = try home.broker()
        let vault = try home.folder("Vault")
        let file = home.path + "/user/vault.bookmark"
        _ = try broker.grant(app: memo, opened: ConfinementPlan.openFolder(vault), access: .readWrite) { bookmark in
            try BookmarkFile(path: file, trust: LinkTrust(appFolders: [])).replace(with: bookmark)
        }
        let moved = home.path + "/user/Vault (2026)"
        try home.move(vault, moved)

        var grants = try LaunchGrants(broker: broker, app: memo, policy: .defaultPolicy, containerBase: home.containers)
        #expect(throws: LaunchGrantError.self) { try grants.resolve(name: "VAULT", bookmark: file) }
        grants.onStale = .follow
        var notices: [String] = []
        grants.notice = { notices.append($0.description) }
        let (rule, variable) = try grants.resolve(name: "VAULT", bookmark: file)
        #expect(variable == "SANDBOX_GRANT_VAULT")
        #expect(rule.path == moved)
        #expect(rule.access == .readWrite)
        #expect(notices.count == 1 && notices[0].contains("bookmark rewritten"))
        // Rewritten: fresh now, without following.
        grants.onStale = .fail
        #expect(try grants.resolve(name: "VAULT", bookmark: file).rule.path == moved)
    }

    /// A follow the launch then refuses (the folder moved into the
    /// containers or the broker's state) writes nothing: the bookmark would
    /// otherwise resolve fresh, to the forbidden place, at the next launch.
    @Test(arguments: ["containers", "state"])
    func aFollowThatIsRefusedRewritesNothing(into protected: String) throws {
        let home = Home()
        let broker = try home.broker()
        let vault = try home.folder("Vault")
        let file = home.path + "/user/vault.bookmark"
        let issued = try broker.grant(app: memo, opened: ConfinementPlan.openFolder(vault), access: .readWrite) { bookmark in
            try BookmarkFile(path: file, trust: LinkTrust(appFolders: [])).replace(with: bookmark)
        }
        let before = try Data(contentsOf: URL(fileURLWithPath: file))
        let moved = (protected == "containers" ? home.containers + "/com.example.memo" : home.statePath) + "/Vault"
        try home.move(vault, moved)

        var grants = try LaunchGrants(broker: broker, app: memo, policy: .defaultPolicy, containerBase: home.containers, onStale: .follow)
        var notices: [String] = []
        grants.notice = { notices.append($0.description) }
        #expect(throws: GrantError.self) { try grants.resolve(name: "VAULT", bookmark: file) }
        #expect(try Data(contentsOf: URL(fileURLWithPath: file)) == before, "the bookmark was rewritten")
        #expect(notices.isEmpty, "\(notices)")
        #expect(try broker.resolve(Array(before), app: memo).status == .moved)
        #expect(try broker.list(app: memo).map(\.path) == [FilePath(vault)], "the ledger followed the move")

        // The library's own renewal refuses it too (`resolve --follow` uses it).
        let resolution = try broker.resolve(issued.bookmark, app: memo)
        #expect(resolution.status == .moved && resolution.currentPath == moved)
        #expect(throws: GrantError.protectedFolder(folder: moved, protected: protected == "containers" ? home.containers : home.statePath)) {
            try broker.renew(resolution, app: memo)
        }
        #expect(try broker.list(app: memo).map(\.path) == [FilePath(vault)])
    }

    @Test func theReadOnlyPolicyDowngradesAndAMissingFileNeedsAPicker() throws {
        let home = Home()
        let broker = try home.broker()
        let vault = try home.folder("Vault")
        let file = home.path + "/user/v.bookmark"
        let readOnly = try #require(Policy.builtin(named: "read-only"))
        var grants = try LaunchGrants(broker: broker, app: memo, policy: readOnly, containerBase: home.containers, onMissing: .prompt)
        #expect(throws: LaunchGrantError.self) { try grants.resolve(name: "V", bookmark: file) }  // no picker given
        grants.picker = { request in
            #expect(request.access == .readOnly)
            return try ConfinementPlan.openFolder(vault)
        }
        let (rule, _) = try grants.resolve(name: "V", bookmark: file)
        #expect(rule.access == .readOnly && rule.path == vault)
        #expect(FileManager.default.fileExists(atPath: file))
    }

    /// A cancelled or failed delivery leaves no live grant behind.
    @Test func aBookmarkThatCannotBeWrittenGrantsNothing() throws {
        let home = Home()
        let broker = try home.broker()
        let vault = try home.folder("Vault")
        #expect(throws: GrantError.self) {
            _ = try broker.grant(app: memo, opened: ConfinementPlan.openFolder(vault), access: .readWrite) { bookmark in
                try BookmarkFile(path: home.path + "/no/such/folder/v.bookmark", trust: LinkTrust(appFolders: [])).replace(with: bookmark)
            }
        }
        #expect(try broker.list(app: memo).allSatisfy { $0.revoked != nil })
    }
}
