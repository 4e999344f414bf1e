// The chat page in headless Chromium (Debian's chromium, driven by
// playwright-core): two tabs of one chat on two web processes.
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, test } from 'node:test'

import { chromium, type BrowserContext, type Page } from 'playwright-core'

import { api, newChat } from '../demo/tab.js'
import type { ChatMessage } from '../web/chat.js'
import { stack, type Stack } from './stack.js'

describe('the chat page in a browser', () => {
	let s: Stack
	let browser: BrowserContext
	let profile: string
	before(async () => {
		s = await stack({ web: 2, reply: true })
		profile = mkdtempSync(join(tmpdir(), 'chat-chromium-'))
		browser = await chromium.launchPersistentContext(profile, {
			executablePath: '/usr/bin/chromium',
			headless: true,
			args: [
				'--no-sandbox',
				'--headless',
				'--disable-gpu',
				'--disable-quic',
				'--no-first-run',
				'--disable-background-networking',
				'--disable-component-update',
				'--disable-sync',
			],
		})
	})
	after(async () => {
		await browser?.close()
		rmSync(profile, { recursive: true, force: true })
		await s.close()
	})

	const chatOf = (source: string) => newChat(s.ports, 'in the browser', source)

	/** Opens the chat in a new tab on web process `n`, once its stream is up and the chat loaded. */
	async function tab(chatId: number, n: number, query = ''): Promise<Page> {
		const page = await browser.newPage()
		await page.goto(`http://127.0.0.1:${s.ports[n]}/chats/${chatId}${query}`)
		await page.waitForSelector('body[data-reloads]')
		return page
	}

	test('CHAN-01 CHAN-03 a message posted in one tab shows its reply in both within a second', async () => {
		const chatId = await chatOf('english/greetings')
		const laptop = await tab(chatId, 0)
		const phone = await tab(chatId, 1)
		await laptop.fill('#send input', 'Hello')
		const t = Date.now()
		await laptop.press('#send input', 'Enter')
		const reply = (p: Page) => p.locator('#messages li.assistant', { hasText: 'Hi' }).waitFor({ timeout: 1000 })
		await Promise.all([reply(laptop), reply(phone)])
		assert.ok(Date.now() - t < 1000, `${Date.now() - t} ms`)
		for (const page of [laptop, phone]) {
			assert.deepEqual(await page.locator('#messages li').allTextContents(), ['Hello', 'Hi'])
			await page.close()
		}
	})

	test('CHAN-02 C1 a tab that falls behind the branch log reloads, then shows every message', async () => {
		const chatId = await chatOf('english/conversations')
		const laptop = await tab(chatId, 0)
		// The phone's stream takes 100 ms per event: a slow network. The
		// subscription serving it falls behind the branch's 1,024 messages.
		const phone = await tab(chatId, 1, '?pace=100')
		const lines = 700
		let next = 0
		await Promise.all(
			Array.from({ length: 16 }, async () => {
				for (let i = next++; i < lines; i = next++) {
					await api(s.ports[i % 2]!, `/api/chats/${chatId}/messages`, { text: `message ${i} ✓`, clientId: `m${i}` })
				}
			}),
		)
		// Each message gets its reply: 1,400 events on the chat's branch.
		let saved: ChatMessage[] = []
		for (let i = 0; i < 200 && saved.length < 2 * lines; i++) {
			saved = await api<ChatMessage[]>(s.ports[0]!, `/api/chats/${chatId}/messages`)
			await new Promise(r => setTimeout(r, 100))
		}
		assert.equal(saved.length, 2 * lines)
		await phone.waitForFunction(() => Number(document.body.dataset.reloads) >= 2, undefined, { timeout: 30_000 })
		for (const page of [laptop, phone]) {
			await page.waitForFunction(n => document.querySelectorAll('#messages li').length === n, saved.length, { timeout: 30_000 })
			const ids = await page.locator('#messages li').evaluateAll(lis => lis.map(li => Number((li as HTMLElement).dataset.id)))
			assert.deepEqual(ids, saved.map(m => m.id))
		}
		assert.equal(await laptop.evaluate(() => document.body.dataset.reloads), '1', 'the tab that kept up never reloaded')
	})
})
